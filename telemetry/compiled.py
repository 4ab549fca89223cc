"""Read statements the ORM would rebuild on every request, compiled once and run as raw SQL.

Some of the console's reads are a fixed statement whose only changing value is a time (the
range's start, "pending since before"): built through the ORM they cost more CPU to compile
(dozens of subqueries and cases) than PostgreSQL spends running them. `CompiledRead` compiles
such a queryset once per key (whatever else shapes it: the thresholds, the database) with
`STANDIN` in place of that time, and puts the real time into the parameters on each run. The
statement is the ORM's own text, so what it reads is by construction what the queryset reads.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any, Final

from django.db import connection
from django.db.models import QuerySet

# A time no row holds: the stand-in compiled into a statement's parameters for the time it takes.
STANDIN: Final = datetime(1, 1, 1, 0, 0, 0, 4242, tzinfo=UTC)


class CompiledRead:
    """One read, compiled once per key (one key held at a time: the latest). The key must
    name everything the statement depends on but the time."""

    def __init__(self) -> None:
        self._held: tuple[Hashable, tuple[str, tuple[Any, ...]]] | None = None

    def statement(
        self, key: Hashable, at: datetime, build: Callable[[datetime], QuerySet[Any]]
    ) -> tuple[str, tuple[Any, ...]]:
        """The SQL and parameters of `build(at)`; `build(STANDIN)` is compiled only when `key`
        (or the database) is not the one held."""
        full_key = (connection.vendor, connection.settings_dict["NAME"], key)
        if self._held is None or self._held[0] != full_key:
            self._held = (full_key, build(STANDIN).query.sql_with_params())
        sql, params = self._held[1]
        # the parameters as the backend takes them (SQLite: text), the stand-in's among them
        standin = connection.ops.adapt_datetimefield_value(STANDIN)
        value = connection.ops.adapt_datetimefield_value(at)
        return sql, tuple(value if p == standin else p for p in params)

    def rows(
        self, key: Hashable, at: datetime, build: Callable[[datetime], QuerySet[Any]]
    ) -> list[dict[str, Any]]:
        """The statement's rows, as dicts by column name."""
        sql, params = self.statement(key, at, build)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
