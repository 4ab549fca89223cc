"""`latest_with_totals`: per partition, its latest row and aggregates over all its rows, in one
statement (PostgreSQL; the caller uses the ORM elsewhere).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connection, models

from telemetry.ingest.statements import few, run, vendor
from telemetry.ingest.values import column_array, from_row
from telemetry.packing import stored_table


def latest_with_totals(
    model: type[models.Model],
    ids: Sequence[int],
    *,
    partition: str,
    latest: str,
    totals: Sequence[tuple[str, str, str]],
) -> list[tuple[Any, dict[str, Any]]] | None:
    """For each `partition` value in `ids`: its row with the highest `latest`, and the
    aggregates `totals` ((name, function, attribute) such as ("n_calls", "SUM", "calls")) over
    all its rows. One statement; None elsewhere than on PostgreSQL (the caller uses the ORM).

    On PostgreSQL a GROUP BY joined back to the latest row on the unique (partition, latest)
    index: compiling the ORM's window-aggregate query on every single-record ingest took
    longer than PostgreSQL takes to run it (docs/performance.md, P2).
    """
    if vendor() != "postgresql":
        return None
    if not ids:
        return []
    sql, names = _latest_with_totals_sql(model, partition, latest, tuple(totals))
    rows = run(sql, [column_array(tuple(ids))], by_index=not few(ids))
    width = len(names)
    out = []
    for values in rows:
        instance = from_row(model, names, values[:width])
        out.append((instance, dict(zip((t[0] for t in totals), values[width:], strict=True))))
    return out


@functools.cache
def _latest_with_totals_sql(
    model: type[models.Model],
    partition: str,
    latest: str,
    totals: tuple[tuple[str, str, str], ...],
) -> tuple[str, list[str]]:
    meta = model._meta
    quote = connection.ops.quote_name
    by_attname = {f.attname: f for f in meta.concrete_fields}
    group, last = quote(by_attname[partition].column), quote(by_attname[latest].column)
    # A SUM is cast back to its column's type, as the ORM reads it (PostgreSQL sums bigints
    # into numeric).
    aggregates = ", ".join(
        f"{function}({quote(by_attname[attname].column)})"
        + (f"::{by_attname[attname].db_type(connection)}" if function == "SUM" else "")
        + f" AS {quote(name)}"
        for name, function, attname in totals
    )
    sql = (
        f"SELECT {', '.join(f't.{quote(f.column)}' for f in meta.concrete_fields)}, "
        f"{', '.join(f'a.{quote(name)}' for name, _, _ in totals)} "
        f"FROM (SELECT {group}, MAX({last}) AS latest_value, {aggregates} "
        f"FROM {quote(stored_table(model))} WHERE {group} = ANY(%s::bigint[]) GROUP BY {group}) AS a "
        f"JOIN {quote(stored_table(model))} AS t ON t.{group} = a.{group} AND t.{last} = a.latest_value"
    )
    return sql, [f.attname for f in meta.concrete_fields]
