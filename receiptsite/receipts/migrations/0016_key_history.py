"""The keys and their history: every change of a signing key's status is a signed statement,
and the database holds the keys' rows to it.

- receipts_keystatement: one key-status/v1 statement per change (ledger/key_statement_v1.py,
  frozen: RFC 8785 bytes, their SHA-256, the signatures of the key that takes over and of the
  outgoing key when it is not compromised), each naming the hash of the one before
  (ledger/key_history.py). Append-only as the tables of 0002 are (on SQLite with 0005's kind
  of trigger against an insert that replaces a row), and a statement is refused unless it
  follows the newest one (its position next, its previous_hash that one's hash), changes no
  key's public key, and follows no compromise of its key.
- receipts_signingkey: no DELETE; no change of a key's id, kid, public key or created_at; no
  second `compromised_at`; an INSERT, or an UPDATE of status, retired_at or compromised_at,
  only when the row then agrees with the newest statement of its key (so the statement's row is
  inserted first, in the same transaction). On PostgreSQL one function,
  receiptsite_key_as_stated(), with its tables named with their schema and a fixed
  search_path, as 0012 wrote the others.
- The keys that exist when this migration runs are stated here, each as it stands (status,
  retired_at, compromised_at), the key in SIGNING_KEY_FILE first, signed by that key and
  marked `made_by = "migration"`: the history vouches for them as they stood at migrate time.
  Their bytes, hash and signature are made here with the libraries themselves (RFC 8785,
  SHA-256, Ed25519, RFC 7638), so that a later change of the site's code cannot change what
  this migration writes. With keys to state and no usable key, the migration stops and says so.
"""

from __future__ import annotations

import base64
import hashlib

import django.utils.timezone
import rfc8785
from cryptography.hazmat.primitives import serialization
from django.conf import settings
from django.db import migrations, models

from receiptsite.ledger.key_statement_v1 import GENESIS, document
from receiptsite.receipts import guards_v1

TABLE = "receipts_keystatement"
KEYS = "receipts_signingkey"
# Every unique key of the statements' table.
UNIQUE_KEYS: list[tuple[str, ...]] = [
    ("id",), ("position",), ("previous_hash",), ("statement_hash",)
]

REFUSED = "USING ERRCODE = 'restrict_violation'"
POSTGRES = [
    f"""CREATE OR REPLACE FUNCTION public.receiptsite_key_statement_follows() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    newest public.{TABLE}%ROWTYPE;
    mine public.{TABLE}%ROWTYPE;
BEGIN
    SELECT * INTO newest FROM public.{TABLE} ORDER BY position DESC LIMIT 1;
    IF (FOUND AND (NEW.position IS DISTINCT FROM newest.position + 1
                   OR NEW.previous_hash IS DISTINCT FROM newest.statement_hash))
       OR (NOT FOUND AND (NEW.position <> 0 OR NEW.previous_hash <> '{GENESIS}')) THEN
        RAISE EXCEPTION 'receiptsite: a key statement out of the chain is refused'
            {REFUSED};
    END IF;
    SELECT * INTO mine FROM public.{TABLE} WHERE kid = NEW.kid ORDER BY position DESC LIMIT 1;
    IF FOUND AND (mine.status = 'compromised' OR mine.public_key <> NEW.public_key) THEN
        RAISE EXCEPTION 'receiptsite: a key statement after its compromise, or with another '
            'public key, is refused' {REFUSED};
    END IF;
    RETURN NEW;
END
$$;""",
    f"""CREATE OR REPLACE FUNCTION public.receiptsite_key_as_stated() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    stated public.{TABLE}%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'receiptsite: DELETE on {KEYS} is refused: a key is kept for ever'
            {REFUSED};
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.id IS DISTINCT FROM OLD.id OR NEW.kid IS DISTINCT FROM OLD.kid
           OR NEW.public_key IS DISTINCT FROM OLD.public_key
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'receiptsite: a change of a key''s kid or public key is refused'
                {REFUSED};
        END IF;
        IF OLD.compromised_at IS NOT NULL
           AND NEW.compromised_at IS DISTINCT FROM OLD.compromised_at THEN
            RAISE EXCEPTION 'receiptsite: a second compromised_at of a key is refused' {REFUSED};
        END IF;
        IF NEW.status = OLD.status AND NEW.retired_at IS NOT DISTINCT FROM OLD.retired_at
           AND NEW.compromised_at IS NOT DISTINCT FROM OLD.compromised_at THEN
            RETURN NEW;
        END IF;
    END IF;
    SELECT * INTO stated FROM public.{TABLE} WHERE kid = NEW.kid ORDER BY position DESC LIMIT 1;
    IF NOT FOUND OR stated.status IS DISTINCT FROM NEW.status
       OR stated.public_key IS DISTINCT FROM NEW.public_key
       OR stated.retired_at IS DISTINCT FROM NEW.retired_at
       OR stated.compromised_at IS DISTINCT FROM NEW.compromised_at THEN
        RAISE EXCEPTION 'receiptsite: % on {KEYS} is refused: no statement of the keys'' '
            'history records it', TG_OP {REFUSED};
    END IF;
    RETURN NEW;
END
$$;""",
    f"CREATE TRIGGER {TABLE}_follows BEFORE INSERT ON public.{TABLE} "
    "FOR EACH ROW EXECUTE FUNCTION public.receiptsite_key_statement_follows();",
    f"CREATE TRIGGER {KEYS}_as_stated BEFORE INSERT OR UPDATE OR DELETE ON public.{KEYS} "
    "FOR EACH ROW EXECUTE FUNCTION public.receiptsite_key_as_stated();",
    f"CREATE TRIGGER {KEYS}_no_truncate BEFORE TRUNCATE ON public.{KEYS} "
    "FOR EACH STATEMENT EXECUTE FUNCTION public.receiptsite_refuse_change();",
]
POSTGRES_DROPS = [
    f"DROP TRIGGER IF EXISTS {TABLE}_follows ON public.{TABLE};",
    f"DROP TRIGGER IF EXISTS {KEYS}_as_stated ON public.{KEYS};",
    f"DROP TRIGGER IF EXISTS {KEYS}_no_truncate ON public.{KEYS};",
    "DROP FUNCTION IF EXISTS public.receiptsite_key_statement_follows();",
    "DROP FUNCTION IF EXISTS public.receiptsite_key_as_stated();",
]


def _sqlite_refuse(name, when, message, op="INSERT", table=KEYS):
    return (f"CREATE TRIGGER {name} BEFORE {op} ON {table} WHEN {when} "
            f"BEGIN SELECT RAISE(ABORT, 'receiptsite: {message}'); END;")


# The newest statement of the key NEW names (SQLite).
NEWEST = f"(SELECT * FROM {TABLE} WHERE kid = NEW.kid ORDER BY position DESC LIMIT 1)"
AS_STATED = (
    f"NOT EXISTS (SELECT 1 FROM {NEWEST} AS s WHERE s.status IS NEW.status "
    "AND s.public_key IS NEW.public_key AND s.retired_at IS NEW.retired_at "
    "AND s.compromised_at IS NEW.compromised_at)"
)
SQLITE = [
    _sqlite_refuse(
        f"{TABLE}_follows",
        f"NEW.position IS NOT coalesce((SELECT max(position) + 1 FROM {TABLE}), 0) "
        f"OR NEW.previous_hash IS NOT coalesce((SELECT statement_hash FROM {TABLE} "
        f"ORDER BY position DESC LIMIT 1), '{GENESIS}') "
        f"OR EXISTS (SELECT 1 FROM {NEWEST} AS s WHERE s.status = 'compromised' "
        "OR s.public_key IS NOT NEW.public_key)",
        "a key statement that does not follow the newest one, follows its key''s compromise "
        "or changes its public key is refused",
        table=TABLE,
    ),
    _sqlite_refuse(f"{KEYS}_no_delete", "1", f"DELETE on {KEYS} is refused: a key is kept "
                   "for ever", op="DELETE"),
    _sqlite_refuse(
        f"{KEYS}_same_key",
        "NEW.id IS NOT OLD.id OR NEW.kid IS NOT OLD.kid OR NEW.public_key IS NOT OLD.public_key "
        "OR NEW.created_at IS NOT OLD.created_at",
        "a change of a key''s kid or public key is refused", op="UPDATE",
    ),
    _sqlite_refuse(
        f"{KEYS}_one_compromise",
        "OLD.compromised_at IS NOT NULL AND NEW.compromised_at IS NOT OLD.compromised_at",
        "a second compromised_at of a key is refused", op="UPDATE",
    ),
    _sqlite_refuse(
        f"{KEYS}_update_as_stated",
        "(NEW.status IS NOT OLD.status OR NEW.retired_at IS NOT OLD.retired_at "
        f"OR NEW.compromised_at IS NOT OLD.compromised_at) AND {AS_STATED}",
        f"UPDATE on {KEYS} is refused: no statement of the keys'' history records it",
        op="UPDATE",
    ),
    _sqlite_refuse(
        f"{KEYS}_insert_as_stated", AS_STATED,
        f"INSERT on {KEYS} is refused: no statement of the keys'' history records it",
    ),
    guards_v1.sqlite_no_replace_trigger(KEYS, [("id",), ("kid",)]),
]
SQLITE_NAMES = [
    f"{TABLE}_follows", f"{KEYS}_no_delete", f"{KEYS}_same_key", f"{KEYS}_one_compromise",
    f"{KEYS}_update_as_stated", f"{KEYS}_insert_as_stated", guards_v1.no_replace_trigger_name(KEYS),
]


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def kid(public):
    """The key's id: the RFC 7638 thumbprint of its JWK (an Ed25519 public key, 32 bytes)."""
    jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64url(public)}
    return _b64url(hashlib.sha256(rfc8785.dumps(jwk)).digest())


def state_existing(apps, schema_editor):
    SigningKey = apps.get_model("receipts", "SigningKey")
    KeyStatement = apps.get_model("receipts", "KeyStatement")
    alias = schema_editor.connection.alias
    rows = list(SigningKey.objects.using(alias).order_by("created_at", "pk"))
    if not rows:
        return
    private = settings.SIGNING_KEY
    if private is None:
        raise RuntimeError(
            f"migration 0016 states the {len(rows)} existing signing keys and must sign the "
            "statements: set SIGNING_KEY_FILE and run migrate again"
        )
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    signer = kid(public)
    mine = [row for row in rows if row.kid == signer]
    if mine and mine[0].status == "compromised":
        raise RuntimeError(
            f"migration 0016 must sign the statements of the existing keys, and the key in "
            f"SIGNING_KEY_FILE ({signer}) is marked compromised: point it at a new key"
        )
    if not mine:  # not recorded yet (a rotation no write path has run for): stated active
        mine = [SigningKey.objects.using(alias).create(kid=signer, public_key=public)]
    now = django.utils.timezone.now()
    previous = GENESIS
    statements = []
    for position, row in enumerate(mine + [row for row in rows if row.kid != signer]):
        doc = document(
            position=position, kid=row.kid, x=_b64url(bytes(row.public_key)), status=row.status,
            at=now, retired_at=row.retired_at, compromised_at=row.compromised_at,
            previous_hash=previous, made_by="migration", signed_by=[signer],
        )
        data = rfc8785.dumps(doc)
        digest = hashlib.sha256(data).hexdigest()
        signature = base64.b64encode(private.sign(data)).decode("ascii")
        statements.append(KeyStatement(
            position=position, kid=row.kid, public_key=bytes(row.public_key), status=row.status,
            at=now, retired_at=row.retired_at, compromised_at=row.compromised_at,
            previous_hash=previous, statement_hash=digest, canonical_bytes=data,
            signatures=[{"kid": signer, "signature": signature}], made_by="migration",
        ))
        previous = digest
    KeyStatement.objects.using(alias).bulk_create(statements)


def install(apps, schema_editor):
    guards_v1.install_append_only(schema_editor, TABLE, UNIQUE_KEYS)
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        statements = POSTGRES
    elif vendor == "sqlite":
        statements = SQLITE
    else:
        raise RuntimeError(f"no key history guards for {vendor}")
    for statement in statements:
        schema_editor.execute(statement, params=None)


def remove(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    drops = (POSTGRES_DROPS if vendor == "postgresql"
             else [f"DROP TRIGGER IF EXISTS {name};" for name in SQLITE_NAMES])
    for statement in drops:
        schema_editor.execute(statement, params=None)
    guards_v1.remove_append_only(schema_editor, TABLE, no_replace=True)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0015_withdrawal_ties_and_statements"),
    ]

    operations = [
        migrations.CreateModel(
            name="KeyStatement",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("position", models.PositiveBigIntegerField(unique=True)),
                ("kid", models.CharField(max_length=64)),
                ("public_key", models.BinaryField(max_length=32)),
                ("status", models.CharField(
                    choices=[("active", "active"), ("retired", "retired"),
                             ("compromised", "compromised")], max_length=12)),
                ("at", models.DateTimeField()),
                ("retired_at", models.DateTimeField(blank=True, null=True)),
                ("compromised_at", models.DateTimeField(blank=True, null=True)),
                ("previous_hash", models.CharField(max_length=64, unique=True)),
                ("statement_hash", models.CharField(max_length=64, unique=True)),
                ("canonical_bytes", models.BinaryField()),
                ("signatures", models.JSONField()),
                ("made_by", models.CharField(
                    choices=[("site", "the site, when the key changed"),
                             ("migration", "migration 0016")],
                    default="site", max_length=16)),
            ],
            options={
                "indexes": [models.Index(fields=["kid", "position"], name="keystatement_kid")],
            },
        ),
        migrations.RunPython(state_existing, migrations.RunPython.noop),
        migrations.RunPython(install, remove),
    ]
