"""The auditor's desk: receipts are read-only in the admin, review decisions append-only."""

from __future__ import annotations

from typing import Any

import django.db
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client

from receiptsite.receipts.models import Receipt, ReviewDecision
from receiptsite.review.services import decision_record
from tests.conftest import Producer, count_receipts

pytestmark = pytest.mark.db

RECEIPTS = "/admin/receipts/receipt/"
DECISIONS = "/admin/receipts/reviewdecision/"


@pytest.fixture
def receipts(producer: Producer) -> list[Receipt]:
    """Three receipts of two workflows, in storage order."""
    answers = [
        producer.publish(idempotency_key="a", workflow_id="wf-alpha"),
        producer.publish(idempotency_key="b", workflow_id="wf-alpha", phase="start", outcome=None),
        producer.publish(idempotency_key="c", workflow_id="wf-beta", outcome="failed"),
    ]
    return [Receipt.objects.get(public_id=a["id"]) for a in answers]


@pytest.fixture
def superuser(admin_user: User) -> User:
    return admin_user


@pytest.fixture
def other_user(db: None) -> User:
    return User.objects.create_user("someone", password="x", is_staff=True)


def listed_ids(response: Any) -> set[str]:
    return {str(r.public_id) for r in response.context["cl"].result_list}


def snapshot(receipt: Receipt) -> tuple[Any, ...]:
    row = Receipt.objects.get(pk=receipt.pk)
    return (row.raw_bytes(), row.workflow_id, row.phase, row.outcome, row.output_hash,
            row.recorded_at, row.subject_name, row.idempotency_key)


# --- receipts: read-only --------------------------------------------------------------------


def test_the_receipt_changelist_opens(admin_client: Client, receipts: list[Receipt]) -> None:
    response = admin_client.get(RECEIPTS)
    assert response.status_code == 200
    assert listed_ids(response) == {str(r.public_id) for r in receipts}
    content = response.content.decode()
    assert "wf-alpha" in content and "wf-beta" in content


@pytest.mark.parametrize(
    ("query", "wanted"),
    [
        ("phase__exact=start", [1]),
        ("outcome__exact=failed", [2]),
        ("reviewed=no", [0, 1, 2]),
        ("reviewed=yes", []),
        ("q=wf-alpha", [0, 1]),
        ("q=wf-beta", [2]),
        ("q=wf-gamma", []),
        ("tenant__id__exact=TENANT", [0, 1, 2]),
        ("recorded_at__year=YEAR", [0, 1, 2]),
    ],
)
def test_the_changelist_filters_and_searches(
    admin_client: Client, receipts: list[Receipt], query: str, wanted: list[int]
) -> None:
    query = query.replace("TENANT", str(receipts[0].tenant_id))
    query = query.replace("YEAR", str(receipts[0].recorded_at.year))
    response = admin_client.get(f"{RECEIPTS}?{query}")
    assert response.status_code == 200
    assert "?e=1" not in response.get("Location", "")
    assert listed_ids(response) == {str(receipts[i].public_id) for i in wanted}


def test_the_reviewed_filter_follows_decisions(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    decision_record(receipt=receipts[2], reviewer=superuser, conclusion="accepted")
    response = admin_client.get(f"{RECEIPTS}?reviewed=yes")
    assert listed_ids(response) == {str(receipts[2].public_id)}
    response = admin_client.get(f"{RECEIPTS}?reviewed=no")
    assert listed_ids(response) == {str(receipts[0].public_id), str(receipts[1].public_id)}


@pytest.mark.parametrize("transform", [str, lambda s: str(s).upper()])
def test_search_by_the_exact_receipt_uuid_finds_that_one_receipt(
    admin_client: Client, receipts: list[Receipt], transform: Any
) -> None:
    wanted = receipts[1]
    response = admin_client.get(RECEIPTS, {"q": transform(wanted.public_id)})
    assert response.status_code == 200
    assert listed_ids(response) == {str(wanted.public_id)}


def test_search_by_a_part_of_the_id_other_than_its_start_finds_nothing(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    response = admin_client.get(RECEIPTS, {"q": str(receipts[1].public_id)[-8:]})
    assert response.status_code == 200
    assert listed_ids(response) == set()


def test_the_receipt_change_page_opens_read_only(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    receipt = receipts[0]
    response = admin_client.get(f"{RECEIPTS}{receipt.pk}/change/")
    assert response.status_code == 200
    content = response.content.decode()
    assert str(receipt.public_id) in content
    assert receipt.output_hash in content
    assert f'href="/run/{receipt.public_id}"' in content
    # Nothing to submit: every field is read-only, and no save or delete button.
    assert response.context["adminform"].form.fields == {}
    assert 'name="_save"' not in content
    assert "/delete/" not in content


def test_receipts_cannot_be_added_in_the_admin(admin_client: Client, receipts: Any) -> None:
    assert admin_client.get(f"{RECEIPTS}add/").status_code == 403
    response = admin_client.post(f"{RECEIPTS}add/", {"workflow_id": "wf-new", "phase": "end"})
    assert response.status_code == 403
    assert count_receipts() == 3
    assert 'href="/admin/receipts/receipt/add/"' not in admin_client.get(RECEIPTS).content.decode()


def test_a_post_to_the_change_page_alters_nothing(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    receipt = receipts[0]
    before = snapshot(receipt)
    response = admin_client.post(
        f"{RECEIPTS}{receipt.pk}/change/",
        {"workflow_id": "wf-forged", "phase": "start", "outcome": "", "subject_name": "x",
         "idempotency_key": "forged", "output_hash": "0" * 64, "_save": "Save"},
    )
    assert response.status_code == 403
    assert snapshot(receipt) == before


def test_receipts_cannot_be_deleted_in_the_admin(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    receipt = receipts[0]
    assert admin_client.get(f"{RECEIPTS}{receipt.pk}/delete/").status_code == 403
    assert admin_client.post(f"{RECEIPTS}{receipt.pk}/delete/", {"post": "yes"}).status_code == 403
    # Nor through the changelist's bulk action.
    response = admin_client.post(
        RECEIPTS, {"action": "delete_selected", "_selected_action": [r.pk for r in receipts],
                   "post": "yes"},
    )
    assert response.status_code in (200, 302)
    assert count_receipts() == 3
    assert snapshot(receipt)[0] == receipt.raw_bytes()


def test_a_tenants_slug_cannot_be_changed_so_its_receipts_keep_verifying(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    tenant = receipts[0].tenant
    response = admin_client.post(
        f"/admin/receipts/tenant/{tenant.pk}/change/",
        {"slug": "renamed", "name": "Acme Renamed", "created_at_0": "2026-01-01",
         "created_at_1": "00:00:00", "_save": "Save"},
    )
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.slug, tenant.name) == ("acme", "Acme Renamed")
    verified = Client().get(f"/api/receipt/{receipts[0].public_id}/verify").json()
    assert verified["status"] == "valid"


# --- review decisions: add-only ---------------------------------------------------------------


def add_decision(client: Client, target: Receipt, **fields: Any) -> Any:
    # The receipt as an auditor names it: its id (review/lookup.py).
    data = {"receipt": str(target.public_id), "output_hash": target.output_hash,
            "conclusion": "accepted", "exception_note": "", "follow_up": "", "supersedes": "",
            "_save": "Save", **fields}
    return client.post(f"{DECISIONS}add/", data)


def test_the_add_form_opens_without_a_reviewer_field_and_asks_for_the_hash_reviewed(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    response = admin_client.get(f"{DECISIONS}add/")
    assert response.status_code == 200
    fields = set(response.context["adminform"].form.fields)
    assert fields == {"receipt", "output_hash", "conclusion", "exception_note", "follow_up",
                      "supersedes"}


def test_adding_a_decision_binds_the_reviewer_and_the_receipts_hash(
    admin_client: Client, receipts: list[Receipt], superuser: User, other_user: User
) -> None:
    receipt = receipts[2]
    response = add_decision(
        admin_client, receipt, conclusion="needs_follow_up", follow_up="Call the client.",
        exception_note="", reviewer=other_user.pk, reviewed_at="2000-01-01 00:00:00",
    )
    assert response.status_code == 302, response.content[:2000]
    decision = ReviewDecision.objects.get()
    assert decision.receipt == receipt
    assert decision.reviewer == superuser
    assert decision.output_hash == receipt.output_hash
    assert decision.conclusion == "needs_follow_up"
    assert decision.follow_up == "Call the client."
    assert decision.reviewed_at.year != 2000
    assert decision.supersedes is None


def test_an_incomplete_add_form_stores_nothing(
    admin_client: Client, receipts: list[Receipt]
) -> None:
    for fields in ({"conclusion": "maybe"}, {"receipt": ""}, {"receipt": 999999},
                   {"conclusion": ""}):
        response = add_decision(admin_client, receipts[0], **fields)
        assert response.status_code == 200
        assert response.context["adminform"].form.errors
    assert ReviewDecision.objects.count() == 0


def test_an_existing_decision_opens_but_cannot_be_changed(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    decision = decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted",
                               follow_up="none")
    url = f"{DECISIONS}{decision.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert page.context["adminform"].form.fields == {}
    assert 'name="_save"' not in page.content.decode()
    response = admin_client.post(
        url, {"receipt": receipts[1].pk, "conclusion": "rejected", "follow_up": "changed",
              "_save": "Save"},
    )
    assert response.status_code == 403
    decision.refresh_from_db()
    assert (decision.receipt_id, decision.conclusion, decision.follow_up) == (
        receipts[0].pk, "accepted", "none"
    )


def test_an_existing_decision_cannot_be_deleted(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    decision = decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted")
    url = f"{DECISIONS}{decision.pk}/delete/"
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    admin_client.post(DECISIONS, {"action": "delete_selected",
                                  "_selected_action": [decision.pk], "post": "yes"})
    assert ReviewDecision.objects.filter(pk=decision.pk).exists()


def test_a_correction_supersedes_and_leaves_the_old_decision_intact(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    receipt = receipts[0]
    old = decision_record(receipt=receipt, reviewer=superuser, conclusion="accepted",
                          follow_up="nothing")
    before = ReviewDecision.objects.filter(pk=old.pk).values().get()
    response = add_decision(admin_client, receipt, conclusion="rejected",
                            exception_note="wrong figures", supersedes=old.pk)
    assert response.status_code == 302, response.content[:2000]
    assert ReviewDecision.objects.count() == 2
    new = ReviewDecision.objects.exclude(pk=old.pk).get()
    assert new.supersedes == old
    assert new.conclusion == "rejected"
    assert new.output_hash == receipt.output_hash
    assert ReviewDecision.objects.filter(pk=old.pk).values().get() == before
    assert old.superseded_by == new  # type: ignore[attr-defined]


def test_a_decision_is_superseded_at_most_once(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    old = decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted")
    assert add_decision(admin_client, receipts[0], supersedes=old.pk).status_code == 302
    response = add_decision(admin_client, receipts[0], conclusion="rejected", supersedes=old.pk)
    assert response.status_code == 200
    assert "supersedes" in response.context["adminform"].form.errors
    assert ReviewDecision.objects.count() == 2


def test_a_correction_must_supersede_a_decision_on_the_same_receipt(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    other = decision_record(receipt=receipts[1], reviewer=superuser, conclusion="accepted")
    response = add_decision(admin_client, receipts[0], supersedes=other.pk)
    assert response.status_code == 200
    assert "supersedes" in response.context["adminform"].form.errors
    assert ReviewDecision.objects.count() == 1


def test_the_receipt_page_lists_its_decisions_read_only(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    decision_record(receipt=receipts[0], reviewer=superuser, conclusion="rejected",
                    follow_up="Ask for the invoice.")
    response = admin_client.get(f"{RECEIPTS}{receipts[0].pk}/change/")
    assert response.status_code == 200
    assert "Ask for the invoice." in response.content.decode()


def test_the_decision_changelist_opens_and_searches(
    admin_client: Client, receipts: list[Receipt], superuser: User
) -> None:
    decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted")
    decision_record(receipt=receipts[2], reviewer=superuser, conclusion="rejected")
    response = admin_client.get(DECISIONS)
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == 2
    response = admin_client.get(DECISIONS, {"q": "wf-beta"})
    assert [d.receipt_id for d in response.context["cl"].result_list] == [receipts[2].pk]
    response = admin_client.get(DECISIONS, {"q": str(receipts[0].public_id)})
    assert [d.receipt_id for d in response.context["cl"].result_list] == [receipts[0].pk]


def test_staff_without_the_add_permission_get_a_403(
    client: Client, receipts: list[Receipt], other_user: User
) -> None:
    other_user.user_permissions.add(
        Permission.objects.get(codename="view_reviewdecision"),
        Permission.objects.get(codename="view_receipt"),
    )
    client.force_login(other_user)
    assert client.get(DECISIONS).status_code == 200
    assert client.get(f"{DECISIONS}add/").status_code == 403
    response = add_decision(client, receipts[0])
    assert response.status_code == 403
    assert ReviewDecision.objects.count() == 0


def test_staff_with_the_add_permission_record_decisions_as_themselves(
    client: Client, receipts: list[Receipt], other_user: User
) -> None:
    other_user.user_permissions.add(
        Permission.objects.get(codename="add_reviewdecision"),
        Permission.objects.get(codename="view_reviewdecision"),
        Permission.objects.get(codename="view_receipt"),
    )
    client.force_login(other_user)
    response = add_decision(client, receipts[0], conclusion="accepted_with_exception",
                            exception_note="late")
    assert response.status_code == 302, response.content[:2000]
    assert ReviewDecision.objects.get().reviewer == other_user


def test_anonymous_visitors_are_sent_to_the_login(client: Client, receipts: Any) -> None:
    response = client.get(RECEIPTS)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


# --- the database itself ---------------------------------------------------------------------


def test_the_database_refuses_to_update_a_decision(
    receipts: list[Receipt], superuser: User
) -> None:
    decision = decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted")
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic():
        ReviewDecision.objects.filter(pk=decision.pk).update(conclusion="rejected")
    decision.conclusion = "rejected"
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic():
        decision.save()
    assert ReviewDecision.objects.get(pk=decision.pk).conclusion == "accepted"


def test_the_database_refuses_to_delete_a_decision(
    receipts: list[Receipt], superuser: User
) -> None:
    decision = decision_record(receipt=receipts[0], reviewer=superuser, conclusion="accepted")
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic():
        ReviewDecision.objects.filter(pk=decision.pk).delete()
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic():
        decision.delete()
    assert ReviewDecision.objects.filter(pk=decision.pk).exists()


def test_the_database_refuses_to_update_or_delete_a_receipt(receipts: list[Receipt]) -> None:
    receipt = receipts[0]
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic():
        Receipt.objects.filter(pk=receipt.pk).update(workflow_id="wf-forged")
    # The ORM refuses a delete itself (the log entry PROTECTs the receipt): ask the database.
    with pytest.raises(django.db.Error, match="append-only"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute("DELETE FROM receipts_receipt WHERE id = %s", [receipt.pk])
    assert snapshot(receipt)[1] == "wf-alpha"
    assert count_receipts() == 3
