"""METRICS_ALLOWED_FROM, read once at start like TRUSTED_PROXIES (the same parser), and who may
read /metrics by it; the paths that answer any Host, each a route of the URLconf. What the
scrape says: tests/db/test_metrics.py and, under gunicorn, tests/live/test_metrics.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as site_settings
from django.test import RequestFactory
from django.urls import resolve

from receiptsite.config import ConfigurationError, metrics_allowed_from
from receiptsite.metrics.exposition import scrape_allowed

pytestmark = pytest.mark.unit


def test_unset_is_the_loopback_and_none_is_nobody() -> None:
    assert [str(n) for n in metrics_allowed_from("")] == ["127.0.0.1/32", "::1/128"]
    assert [str(n) for n in metrics_allowed_from("  ")] == ["127.0.0.1/32", "::1/128"]
    assert metrics_allowed_from("none") == metrics_allowed_from(" None ") == ()
    assert [str(n) for n in metrics_allowed_from("10.0.0.0/24, fd00::9")] == [
        "10.0.0.0/24", "fd00::9/128"
    ]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("prometheus.internal", "not 'prometheus.internal'"),
        ("10.0.0.1/24", "10.0.0.1/24 has host bits set"),
        ("*", "not '*'"),
        ("none, 10.0.0.1", "not 'none'"),  # `none` alone, or addresses
    ],
)
def test_what_it_cannot_parse_is_refused_naming_the_variable(value: str, words: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        metrics_allowed_from(value)
    assert caught.value.variable == "METRICS_ALLOWED_FROM"
    assert str(caught.value).startswith("METRICS_ALLOWED_FROM takes IP addresses and CIDR ranges")
    assert "or none" in str(caught.value) and words in str(caught.value)


def allowed(peer: str, **headers: str) -> bool:
    return scrape_allowed(RequestFactory().get("/metrics", REMOTE_ADDR=peer, headers=headers))


def test_the_peer_decides_and_a_forwarded_request_is_never_allowed(settings: Any) -> None:
    settings.METRICS_ALLOWED_FROM = metrics_allowed_from("")
    assert allowed("127.0.0.1") and allowed("::1") and allowed("::ffff:127.0.0.1")
    assert not allowed("127.0.0.2") and not allowed("10.0.0.5") and not allowed("not an address")
    assert not allowed("")
    settings.METRICS_ALLOWED_FROM = metrics_allowed_from("10.0.0.0/24")
    assert allowed("10.0.0.5") and not allowed("127.0.0.1")
    for header in ({"x_forwarded_for": "10.0.0.6"}, {"forwarded": "for=10.0.0.6"},
                   {"x_real_ip": "10.0.0.6"}):
        assert not allowed("10.0.0.5", **header), header


def test_each_path_that_answers_any_host_is_a_route_and_stays_plain_http() -> None:
    assert site_settings.ANY_HOST_PATHS == ("/healthz", "/metrics")
    assert [resolve(path).url_name for path in site_settings.ANY_HOST_PATHS] == [
        "healthz", "metrics"
    ]
    assert site_settings.SECURE_REDIRECT_EXEMPT == ["^healthz$", "^metrics$"]
