"""The admin's sign-in, the auditors' door, is throttled by django-axes: 5 wrong passwords for
one account, or from one client address, lock that account, or that address, out for 15
minutes (settings.AXES_*). The lockout answer is a plain 429 page; the log says who and from
where, never the password."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.db

PASSWORD = "a-long-test-password-1"
WRONG = "not-the-password-7f3a"
HERE, ELSEWHERE = "127.0.0.1", "198.51.100.7"  # REMOTE_ADDR values only; nothing is sent


@pytest.fixture
def ada(db: None) -> User:
    return User.objects.create_user("ada", password=PASSWORD, is_staff=True)


@pytest.fixture
def grace(db: None) -> User:
    return User.objects.create_user("grace", password=PASSWORD, is_staff=True)


def sign_in(username: str, password: str, address: str = HERE, **headers: str) -> Any:
    """One attempt from a fresh browser (no session) at `address`."""
    return Client(REMOTE_ADDR=address).post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password, "next": "/admin/"},
        headers=headers,
    )


def signed_in(response: Any) -> bool:
    return response.status_code == 302 and response["Location"] == "/admin/"


def locked_out(response: Any) -> bool:
    return response.status_code == 429 and b"Too many failed sign-ins" in response.content


def fail(username: str, times: int, address: str = HERE, **headers: str) -> Any:
    """`times` wrong passwords; the last answer. Each before it is the form again, with its
    error (the one that reaches the limit is already the lockout answer)."""
    for _ in range(times - 1):
        response = sign_in(username, WRONG, address, **headers)
        assert response.status_code == 200, response.status_code
        assert b"Please enter the correct username and password" in response.content
    return sign_in(username, WRONG, address, **headers)


def test_the_limit_is_five_failures_and_fifteen_minutes() -> None:
    assert settings.AXES_FAILURE_LIMIT == 5
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME


def test_a_correct_password_signs_in_before_the_limit(ada: User) -> None:
    fail("ada", 4)
    assert signed_in(sign_in("ada", PASSWORD))


def test_a_correct_sign_in_clears_the_count(ada: User) -> None:
    fail("ada", 4)
    assert signed_in(sign_in("ada", PASSWORD))
    fail("ada", 4)
    assert signed_in(sign_in("ada", PASSWORD))


def test_the_fifth_wrong_password_is_answered_with_the_lockout(ada: User) -> None:
    assert not locked_out(fail("ada", 4))
    assert locked_out(sign_in("ada", WRONG))


def test_five_wrong_passwords_lock_the_account_even_for_the_right_one(ada: User) -> None:
    fail("ada", 5)
    response = sign_in("ada", PASSWORD)
    assert locked_out(response)
    assert response["Content-Type"] == "text/html; charset=utf-8"
    text = response.content.decode()
    assert "5 wrong passwords" in text
    assert "Try again in 15 minutes" in text
    assert "_auth_user_id" not in response.client.session


def test_the_locked_account_stays_locked_from_another_address(ada: User) -> None:
    fail("ada", 5, HERE)
    assert locked_out(sign_in("ada", PASSWORD, ELSEWHERE))


def test_a_locked_address_cannot_sign_in_to_another_account(ada: User, grace: User) -> None:
    fail("ada", 5, HERE)
    assert locked_out(sign_in("grace", PASSWORD, HERE))


def test_guessing_across_accounts_locks_the_address(ada: User, grace: User) -> None:
    for name in ("ada", "grace", "nobody", "admin"):
        assert fail(name, 1, HERE).status_code == 200
    assert locked_out(fail("root", 1, HERE))
    assert locked_out(sign_in("ada", PASSWORD, HERE))


def test_another_account_from_another_address_is_not_affected(ada: User, grace: User) -> None:
    fail("ada", 5, HERE)
    assert signed_in(sign_in("grace", PASSWORD, ELSEWHERE))


def test_behind_a_trusted_proxy_each_client_address_counts_on_its_own(
    settings: Any, ada: User, grace: User
) -> None:
    settings.TRUSTED_PROXIES = [HERE]
    for name in ("ada", "grace", "nobody", "admin"):
        assert fail(name, 1, HERE, X_Forwarded_For="203.0.113.9").status_code == 200
    assert locked_out(fail("root", 1, HERE, X_Forwarded_For="203.0.113.9"))
    # The guesser's address is locked, not the proxy's: another client still signs in.
    assert locked_out(sign_in("grace", PASSWORD, HERE, X_Forwarded_For="203.0.113.9"))
    assert signed_in(sign_in("grace", PASSWORD, HERE, X_Forwarded_For="203.0.113.10"))
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.9"}


def test_the_lock_lifts_after_the_cool_off(ada: User) -> None:
    fail("ada", 5)
    assert locked_out(sign_in("ada", PASSWORD))
    last = AccessAttempt.objects.get(username="ada")
    AccessAttempt.objects.filter(pk=last.pk).update(
        attempt_time=last.attempt_time - timedelta(minutes=15, seconds=1)
    )
    assert signed_in(sign_in("ada", PASSWORD))


def test_the_lockout_is_logged_without_the_password(
    caplog: pytest.LogCaptureFixture, ada: User
) -> None:
    with caplog.at_level(logging.INFO, logger="axes"):
        fail("ada", 5)
        sign_in("ada", PASSWORD)
    lockouts = [r.getMessage() for r in caplog.records if "Locking out" in r.getMessage()]
    assert lockouts
    assert 'username: "ada"' in lockouts[0]
    assert f'ip_address: "{HERE}"' in lockouts[0]
    assert WRONG not in caplog.text and PASSWORD not in caplog.text
    # Nor is it stored with the attempts.
    stored = AccessAttempt.objects.get(username="ada")
    assert "ada" in stored.post_data
    assert WRONG not in stored.post_data and PASSWORD not in stored.post_data
