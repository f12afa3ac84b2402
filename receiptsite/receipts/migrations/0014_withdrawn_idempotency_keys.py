"""A withdrawn receipt's idempotency key stays spent: the withdrawal keeps a keyed hash of it.

A withdrawal erases the receipt's idempotency key with its content (0009), so the same POST
again (a producer's outbox retrying after a crash between its send and its note of the answer)
stored the withdrawn content again, under a new id. Each withdrawal now keeps, in the row
written in the transaction that erases, `idempotency_key_hash`: HMAC-SHA-256 of the receipt's
tenant and key under a key derived from SECRET_KEY (withdrawal/withdrawals.py), never the key
itself. Ingest refuses a key whose hash a withdrawal of the same tenant holds (410), in its one
idempotency look-up, which the index serves.

The column is nullable with no default, so that adding it changes no row and, on SQLite, is an
ALTER TABLE that keeps the table and its append-only triggers (0009) as they are; PostgreSQL
keeps its triggers and row-level security policies through ALTER TABLE too. The withdrawal
table stays append-only: the hash is written with the row, never after. Withdrawals made
before this migration keep a NULL: their keys were erased already, so nothing can be hashed,
and a retry of one of them is stored again as before.
"""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0013_database_stamps_signed_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="withdrawal",
            name="idempotency_key_hash",
            field=models.CharField(blank=True, editable=False, max_length=64, null=True),
        ),
        migrations.AddIndex(
            model_name="withdrawal",
            index=models.Index(
                fields=["tenant", "idempotency_key_hash"], name="withdrawal_key_hash"
            ),
        ),
    ]
