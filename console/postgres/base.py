"""Django's PostgreSQL backend, but for `is_usable`: the health check Django runs on a reused
connection before a request's first statement (`CONN_HEALTH_CHECKS`).

Django's check is a `SELECT 1`: a round trip on every request, CPU of the web process and of
PostgreSQL on a single-record ingest, a tenth of its work (docs/performance.md). Here an
idle connection whose socket has nothing to read is usable without
asking the server: a server that closes a connection (restart, `pg_terminate_backend`,
`idle_session_timeout`) sends its reason and closes the socket, which makes it readable, and
an idle session is otherwise sent nothing (this service LISTENs to nothing). Whatever is waiting
to be read, and any connection not idle, gets Django's `SELECT 1`, which reads it and closes the
connection when the server has. A peer that vanished without closing the socket is found by
neither check before the request's first statement fails, as before.
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        raw = self.connection
        if raw is None or raw.closed:
            return False
        if raw.info.transaction_status == TransactionStatus.IDLE and not _readable(raw.fileno()):
            return True
        usable: bool = super().is_usable()
        return usable


def _readable(fd: int) -> bool:
    """Whether the socket `fd` has something to read (or its peer has closed it), now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))
