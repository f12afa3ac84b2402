"""The auditors' record: every review decision signed and chained to the one before it
(review/chain.py), in its own append-only table, guarded like the others (0002's
triggers; on SQLite 0005's kind of trigger against an insert that replaces a row).

The decisions that exist when this migration runs are chained here, in the order they were
recorded (their ids), signed by the key in SIGNING_KEY_FILE, and marked `chained_by =
"migration"`: the record vouches for them as they stood at migrate time, not at the time they
were made. This only inserts rows; no trigger is lifted, and the site's own code gets no way to
chain a decision other than by recording it. With decisions to chain and no usable key, the
migration stops and says so.

The document it signs is review-decision/v1, from its frozen module (review/decision_v1.py, which
review/chain.py uses too); its bytes, hash, signature and key id are made here with the
libraries themselves (RFC 8785, SHA-256, Ed25519, the key's RFC 7638 thumbprint), so that a
later change of the site's code cannot change what this migration writes
(tests/db/test_decision_chain.py holds them to the site's).
"""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime

import django.db.models.deletion
import django.utils.timezone
import rfc8785
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.db import migrations, models

from receiptsite.receipts import guards_v1
from receiptsite.review.decision_v1 import CHAIN_FIELDS, DECISION_FIELDS, GENESIS, document

TABLE = "receipts_decisionlink"
# Every unique key of the table (tests/db/test_decision_chain.py checks it against the database).
UNIQUE_KEYS: list[tuple[str, ...]] = [
    ("id",), ("position",), ("decision_id",), ("previous_hash",)
]

def canonical_bytes(doc):
    return rfc8785.dumps(doc)


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def kid(public):
    """The key's id: the RFC 7638 thumbprint of its JWK (an Ed25519 public key, 32 bytes)."""
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(public)}
    return _b64url(hashlib.sha256(canonical_bytes(jwk)).digest())


def install(apps, schema_editor):
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)


def remove(apps, schema_editor):
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


def chain_existing(apps, schema_editor):
    ReviewDecision = apps.get_model("receipts", "ReviewDecision")
    DecisionLink = apps.get_model("receipts", "DecisionLink")
    SigningKey = apps.get_model("receipts", "SigningKey")
    alias = schema_editor.connection.alias
    lookups = [lookup for _, lookup in DECISION_FIELDS]
    rows = list(ReviewDecision.objects.using(alias).order_by("id").values(*lookups))
    if not rows:
        return
    private = settings.SIGNING_KEY
    if private is None:
        raise RuntimeError(
            f"migration 0011 chains the {len(rows)} existing review decisions and must sign "
            "them: set SIGNING_KEY_FILE and run migrate again"
        )
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    key, _ = SigningKey.objects.using(alias).get_or_create(
        kid=kid(public), defaults={"public_key": public}
    )
    if key.status == "compromised":
        raise RuntimeError(
            f"migration 0011 must sign the existing review decisions, and the key in "
            f"SIGNING_KEY_FILE ({key.kid}) is marked compromised: point it at a new key"
        )
    now = django.utils.timezone.now()
    previous_id, previous_hash = None, GENESIS
    links = []
    for position, row in enumerate(rows):
        chain = {"previous_decision_id": previous_id, "previous_hash": previous_hash,
                 "chained_at": now, "chained_by": "migration"}
        data = canonical_bytes(document(row, chain))
        digest = hashlib.sha256(data).hexdigest()
        links.append(DecisionLink(
            position=position, decision_id=row["id"], canonical_bytes=data,
            decision_hash=digest, signature=private.sign(data), signing_key=key, **chain,
        ))
        previous_id, previous_hash = row["id"], digest
    DecisionLink.objects.using(alias).bulk_create(links)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0010_key_compromise"),
    ]

    operations = [
        migrations.CreateModel(
            name="DecisionLink",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("position", models.PositiveBigIntegerField(unique=True)),
                ("previous_decision_id", models.BigIntegerField(blank=True, null=True)),
                ("previous_hash", models.CharField(max_length=64, unique=True)),
                ("canonical_bytes", models.BinaryField()),
                ("decision_hash", models.CharField(max_length=64)),
                ("signature", models.BinaryField(max_length=64)),
                ("chained_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("chained_by", models.CharField(
                    choices=[("site", "the site, when it was recorded"),
                             ("migration", "migration 0011")],
                    default="site", max_length=16)),
                ("decision", models.OneToOneField(
                    on_delete=django.db.models.deletion.DO_NOTHING, related_name="link",
                    to="receipts.reviewdecision")),
                ("signing_key", models.ForeignKey(
                    on_delete=django.db.models.deletion.PROTECT, related_name="+",
                    to="receipts.signingkey")),
            ],
        ),
        migrations.RunPython(install, remove),
        migrations.RunPython(chain_existing, migrations.RunPython.noop),
    ]
