from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.signals import post_migrate

from receiptsite.receipts import rowsecurity


class ReceiptsConfig(AppConfig):
    name = "receiptsite.receipts"
    label = "receipts"
    verbose_name = "Receipts"

    def ready(self) -> None:
        post_migrate.connect(sign_after_migrate, sender=self)
        post_migrate.connect(rowsecurity.after_migrate, sender=self)


def sign_after_migrate(*, using: str, stdout: Any = None, **kwargs: Any) -> None:
    """`migrate` is a write path of the log: it records the configured signing key and signs
    the stored tree head unless the latest checkpoint already is that (the empty tree's on a
    new database, the first by a rotated key), so that a read always has a checkpoint to
    serve and never signs one itself."""
    from receiptsite.ledger import log
    from receiptsite.problems import Problem
    from receiptsite.receipts.models import LogContinuation, SignedCheckpoint

    connection = connections[using]
    read = {SignedCheckpoint._meta.db_table, LogContinuation._meta.db_table}  # what signing reads
    if using != DEFAULT_DB_ALIAS or not read <= set(connection.introspection.table_names()):
        return  # migrated backwards, or another database
    try:
        log.sign_head()
    except Problem as error:
        # The migration itself succeeded; /healthz and `checklog` say the same until fixed.
        if stdout is not None:
            stdout.write(f"The transparency log was not signed: {error.detail}")
