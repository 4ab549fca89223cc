"""The read replica's router (`DATABASE_REPLICA_URL`, docs/scaling.md#read-replicas).

Reads go to `settings.REPLICA_DATABASE` only where `console.replica` allows them (read-only
pages, outside a transaction); every write, every migration and every other read go to the
primary (`default`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model

from console.replica import replica_reads_allowed


class ReplicaRouter:
    def db_for_read(self, model: type[Model], **hints: Any) -> str | None:
        alias: str | None = settings.REPLICA_DATABASE
        if alias is None or not replica_reads_allowed():
            return None
        if connections[DEFAULT_DB_ALIAS].in_atomic_block:
            return None  # a transaction reads what it writes: the primary
        return alias

    def db_for_write(self, model: type[Model], **hints: Any) -> str | None:
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Model, obj2: Model, **hints: Any) -> bool | None:
        # the replica holds the primary's rows: a row read from either relates to the other's
        same = {DEFAULT_DB_ALIAS, settings.REPLICA_DATABASE}
        return True if {obj1._state.db, obj2._state.db} <= same else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return None if db == DEFAULT_DB_ALIAS else False
