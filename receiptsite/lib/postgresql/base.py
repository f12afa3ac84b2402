"""Django's PostgreSQL backend, with a health check of a kept connection that costs no round
trip while the connection is sound (settings.database: ENGINE "receiptsite.lib.postgresql").

With CONN_HEALTH_CHECKS, Django asks a kept connection `SELECT 1` before its first query in
each request: a round trip per request, a second one on a route that runs one query
(/healthz), and PostgreSQL's own work on the same cores. A connection at rest between requests
has nothing to read: when the server closes it (a restart, pg_terminate_backend, an idle
timeout, a failover), its socket becomes readable (the server's last message, then the end of
the stream). So the socket is looked at first, without waiting, and only a readable one (or
one psycopg already knows to be closed or broken) is asked `SELECT 1` as before, and dropped
if that fails. A server that vanished without closing anything (a cut cable) is caught, as
before the change too, by the connection's keepalives and DATABASE_TIMEOUT on the request's
first query, which then answers 503.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        try:
            readable, _, _ = select.select([connection.fileno()], [], [], 0)
        except (OSError, ValueError):
            return False
        if not readable:
            return True
        return bool(super().is_usable())
