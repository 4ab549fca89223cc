"""Read statements the ORM would rebuild on every request, compiled once and run as raw SQL.

Some of the console's reads are a fixed statement whose only changing value is a time (the
range's start, "pending since before"): built through the ORM they cost more CPU to compile
(dozens of subqueries and cases) than PostgreSQL spends running them. `CompiledRead` compiles
such a queryset once per key (whatever else shapes it: the thresholds, the database) with
`STANDIN` in place of that time, and puts the real time into the parameters on each run. The
statement is the ORM's own text, so what it reads is by construction what the queryset reads,
on the database the routers pick for a read of its model (a replica where one serves reads).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any, Final

from django.db import connections, router
from django.db.models import Model, QuerySet

# A time no row holds: the stand-in compiled into a statement's parameters for the time it takes.
STANDIN: Final = datetime(1, 1, 1, 0, 0, 0, 4242, tzinfo=UTC)


class CompiledRead:
    """One read of `model`'s table, compiled once per key (one key held at a time: the latest).
    The key must name everything the statement depends on but the time."""

    def __init__(self, model: type[Model]) -> None:
        self.model = model
        self._held: tuple[Hashable, tuple[str, tuple[Any, ...]]] | None = None

    def statement(
        self, key: Hashable, at: datetime, build: Callable[[datetime], QuerySet[Any]]
    ) -> tuple[str, str, tuple[Any, ...]]:
        """The database alias, SQL and parameters of `build(at)`; `build(STANDIN)` is compiled
        only when `key` (or the database) is not the one held."""
        alias = router.db_for_read(self.model) or "default"
        connection = connections[alias]
        full_key = (alias, connection.vendor, connection.settings_dict["NAME"], key)
        if self._held is None or self._held[0] != full_key:
            compiler = build(STANDIN).query.get_compiler(using=alias)
            self._held = (full_key, compiler.as_sql())
        sql, params = self._held[1]
        # the parameters as the backend takes them (SQLite: text), the stand-in's among them
        standin = connection.ops.adapt_datetimefield_value(STANDIN)
        value = connection.ops.adapt_datetimefield_value(at)
        return alias, sql, tuple(value if p == standin else p for p in params)

    def rows(
        self, key: Hashable, at: datetime, build: Callable[[datetime], QuerySet[Any]]
    ) -> list[dict[str, Any]]:
        """The statement's rows, as dicts by column name."""
        alias, sql, params = self.statement(key, at, build)
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, params)
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
