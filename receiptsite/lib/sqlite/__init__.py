"""Django's SQLite backend, whose writers wait on locks that wake the next one when a write
ends, among a process's threads and among processes (settings.database: ENGINE
"receiptsite.lib.sqlite"; see base.py)."""
