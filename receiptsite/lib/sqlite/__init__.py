"""Django's SQLite backend, with the write lock queued in the process (settings.database:
ENGINE "receiptsite.lib.sqlite"; see base.py)."""
