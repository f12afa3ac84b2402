"""Withdrawals are evidence too: each is a signed statement in a chain, and the database ties
a withdrawal to its receipt's tenant and public id.

- receipts_withdrawalstatement: one statement per withdrawal (withdrawal/statement_v1.py,
  frozen: RFC 8785 bytes, their SHA-256, the site's Ed25519 signature and key), each naming
  the hash of the one before (withdrawal/statements.py). Append-only as the tables of 0002 are
  (on SQLite with 0005's kind of trigger against an insert that replaces a row).
- receipts_withdrawal refuses a row whose tenant or receipt public id is not its receipt's:
  a trigger on both databases (PostgreSQL: receiptsite_withdrawal_tie(), with its tables named
  with their schema and a fixed search_path, as 0012 wrote the others). The receipts' erasure
  trigger (0009, 0012) already looks for a withdrawal of the receipt's own tenant; now no other
  can be written.
- The withdrawals that exist when this migration runs are stated here, in the order they were
  made (their ids), signed by the key in SIGNING_KEY_FILE, `stated_by = "migration"`: the
  chain vouches for them as they stood at migrate time. Their bytes, hash, signature and key
  id are made here with the libraries themselves (RFC 8785, SHA-256, Ed25519, RFC 7638), so that
  a later change of the site's code cannot change what this migration writes. With
  withdrawals to state and no usable key, the migration stops and says so.
"""

from __future__ import annotations

import base64
import hashlib

import django.db.models.deletion
import django.utils.timezone
import rfc8785
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.db import migrations, models

from receiptsite.receipts import guards_v1
from receiptsite.withdrawal.statement_v1 import GENESIS, WITHDRAWAL_FIELDS, statement

TABLE = "receipts_withdrawalstatement"
WITHDRAWALS = "receipts_withdrawal"
RECEIPTS = "receipts_receipt"
# Every unique key of the table.
UNIQUE_KEYS: list[tuple[str, ...]] = [
    ("id",), ("position",), ("withdrawal_id",), ("previous_hash",), ("statement_hash",)
]
TIE = "receiptsite_withdrawal_tie"
REFUSED = (
    "receiptsite: a withdrawal must name the tenant and public id of its receipt; this one does not"
)
# The receipt a withdrawal row names, with the row's tenant and public id.
MATCH = (
    "SELECT 1 FROM {receipts} r WHERE r.id = NEW.receipt_id AND r.tenant_id = NEW.tenant_id "
    "AND r.public_id = NEW.receipt_public_id"
)

POSTGRES_TIE = [
    f"""CREATE OR REPLACE FUNCTION public.{TIE}() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NOT EXISTS ({MATCH.format(receipts="public." + RECEIPTS)}) THEN
        RAISE EXCEPTION '{REFUSED}' USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END $$;""",
    f"CREATE TRIGGER {WITHDRAWALS}_tie BEFORE INSERT ON public.{WITHDRAWALS} "
    f"FOR EACH ROW EXECUTE FUNCTION public.{TIE}();",
]
POSTGRES_UNTIE = [
    f"DROP TRIGGER IF EXISTS {WITHDRAWALS}_tie ON public.{WITHDRAWALS};",
    f"DROP FUNCTION IF EXISTS public.{TIE}();",
]
SQLITE_TIE = [
    f"CREATE TRIGGER {WITHDRAWALS}_tie BEFORE INSERT ON {WITHDRAWALS} "
    f"WHEN NOT EXISTS ({MATCH.format(receipts=RECEIPTS)}) "
    f"BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END;",
]
SQLITE_UNTIE = [f"DROP TRIGGER IF EXISTS {WITHDRAWALS}_tie;"]


def canonical_bytes(doc):
    return rfc8785.dumps(doc)


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def kid(public):
    """The key's id: the RFC 7638 thumbprint of its JWK (an Ed25519 public key, 32 bytes)."""
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(public)}
    return _b64url(hashlib.sha256(canonical_bytes(jwk)).digest())


def install(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)
    for sql in POSTGRES_TIE if vendor == "postgresql" else SQLITE_TIE:
        schema_editor.execute(sql)


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    for sql in POSTGRES_UNTIE if vendor == "postgresql" else SQLITE_UNTIE:
        schema_editor.execute(sql)
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


def state_existing(apps, schema_editor):
    Withdrawal = apps.get_model("receipts", "Withdrawal")
    Statement = apps.get_model("receipts", "WithdrawalStatement")
    SigningKey = apps.get_model("receipts", "SigningKey")
    LogNode = apps.get_model("receipts", "LogNode")
    alias = schema_editor.connection.alias
    lookups = ["id", "receipt__log_entry__index", *(lookup for _, lookup in WITHDRAWAL_FIELDS)]
    rows = list(Withdrawal.objects.using(alias).order_by("id").values(*lookups))
    if not rows:
        return
    private = settings.SIGNING_KEY
    if private is None:
        raise RuntimeError(
            f"migration 0015 states the {len(rows)} existing withdrawals and must sign "
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
            f"migration 0015 must sign the existing withdrawals, and the key in "
            f"SIGNING_KEY_FILE ({key.kid}) is marked compromised: point it at a new key"
        )
    # A leaf hash is the log's node at level 0, whose key is the leaf's index.
    indexes = [row["receipt__log_entry__index"] for row in rows]
    nodes = LogNode.objects.using(alias).filter(key__in=[i for i in indexes if i is not None])
    leaves = {node.key: bytes(node.hash) for node in nodes}
    now = django.utils.timezone.now()
    previous_hash = GENESIS
    statements = []
    for position, row in enumerate(rows):
        leaf = leaves.get(row["receipt__log_entry__index"])
        chain = {"position": position, "previous_hash": previous_hash, "stated_at": now,
                 "stated_by": "migration"}
        leaf_b64 = None if leaf is None else base64.b64encode(leaf).decode("ascii")
        data = canonical_bytes(statement(row, leaf_b64, chain))
        digest = hashlib.sha256(data).hexdigest()
        statements.append(Statement(
            withdrawal_id=row["id"], canonical_bytes=data, statement_hash=digest,
            signature=private.sign(data), signing_key=key, **chain,
        ))
        previous_hash = digest
    Statement.objects.using(alias).bulk_create(statements)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0014_withdrawn_idempotency_keys"),
    ]

    operations = [
        migrations.CreateModel(
            name="WithdrawalStatement",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("position", models.PositiveBigIntegerField(unique=True)),
                ("previous_hash", models.CharField(max_length=64, unique=True)),
                ("canonical_bytes", models.BinaryField()),
                ("statement_hash", models.CharField(max_length=64, unique=True)),
                ("signature", models.BinaryField(max_length=64)),
                ("stated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("stated_by", models.CharField(
                    choices=[("site", "the site, when it was made"),
                             ("migration", "migration 0015")],
                    default="site", max_length=16)),
                ("withdrawal", models.OneToOneField(
                    on_delete=django.db.models.deletion.DO_NOTHING, related_name="statement",
                    to="receipts.withdrawal")),
                ("signing_key", models.ForeignKey(
                    on_delete=django.db.models.deletion.PROTECT, related_name="+",
                    to="receipts.signingkey")),
            ],
        ),
        migrations.RunPython(install, remove),
        migrations.RunPython(state_existing, migrations.RunPython.noop),
    ]
