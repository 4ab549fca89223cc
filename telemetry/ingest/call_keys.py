"""The stored calls' idempotency keys, read in one statement (`stored_call_keys`), and a single
record's read of them, insert and turn derivation in one statement (`insert_and_derive`).
PostgreSQL; the callers use the ORM elsewhere.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from django.db import connection, models

from telemetry.digests import digest_from_text
from telemetry.ingest.new_rows import insert_parts
from telemetry.ingest.statements import few, run, vendor
from telemetry.ingest.turn_derivation import derive_turns_parts, derived_turns
from telemetry.ingest.values import column_array, pairs_arrays, text_array
from telemetry.packing import stored_table


def stored_call_keys(
    model: type[models.Model],
    positions: Sequence[tuple[int, int]],
    requests: Sequence[tuple[int, str]],
) -> list[tuple[Any, ...]] | None:
    """(session_id, turn, call, request_id, payload_hash) of the stored calls at the (session,
    turn) pairs `positions` or under the (session, request id) pairs `requests`; one statement
    on PostgreSQL, None elsewhere (the caller uses the ORM). Its text never varies, so no ORM
    compiles it on every ingest.

    Each pair is probed through its unique index (LATERAL, kept from being flattened into a
    join by `OFFSET 0`): with every session's calls read and filtered by turn, a batch into a
    session of 100,000 calls read all of them, and a set join could be planned as a scan of the
    whole table while its statistics did not yet know the rows it had just copied."""
    if vendor() != "postgresql":
        return None
    if len(positions) == 1 and len(requests) <= 1:
        # A single record: scalar values, so the prepared statement's generic plan probes the
        # two unique indexes whatever the table's size was when it was planned (one key as
        # scalars, as in `telemetry.ingest.turn_derivation`).
        (session_id, turn), request_id = positions[0], requests[0][1] if requests else None
        one = [session_id, turn, session_id, request_id]
        return run(_stored_call_keys_sql(model, single=True), one)
    sql = _stored_call_keys_sql(model, single=False)
    # no positions: two empty arrays
    params = [
        *(pairs_arrays(positions) if positions else ("{}", "{}")),
        *requests_arrays(requests),
    ]
    return run(sql, params, by_index=not (few(positions) and few(requests)))


def requests_arrays(requests: Sequence[tuple[int, str]]) -> list[Any]:
    """(session, request id) pairs as a `bigint[]` and a `text[]` value (`values`' literals)."""
    return [column_array(tuple(sid for sid, _ in requests)), text_array(rid for _, rid in requests)]


@functools.cache
def _stored_call_keys_sql(model: type[models.Model], *, single: bool) -> str:
    quote = connection.ops.quote_name
    by_attname = {f.attname: f for f in model._meta.concrete_fields}
    session, turn, call, request_id, digest = (
        quote(by_attname[name].column)
        for name in ("session_id", "turn", "call", "request_id", "payload_hash")
    )
    table = quote(stored_table(model))
    columns = f"{session}, {turn}, {call}, {request_id}, {digest}"
    if single:
        # Two probes, one per unique index: with `turn = $2 OR request_id = $3` a generic plan
        # probes the session alone and filters all its calls (a long session's thousands).
        select = f"SELECT {columns} FROM {table} WHERE "
        return (
            f"{select}{session} = %s::bigint AND {turn} = %s::integer "
            f"UNION {select}{session} = %s::bigint AND {request_id} = %s::text"
        )
    probe = f"CROSS JOIN LATERAL (SELECT {columns} FROM {table} AS c WHERE c.{session} = k.sid AND "
    return (
        f"SELECT c.* FROM unnest(%s::bigint[], %s::integer[]) AS k (sid, t) "
        f"{probe}c.{turn} = k.t OFFSET 0) AS c "
        f"UNION SELECT c.* FROM unnest(%s::bigint[], %s::text[]) AS k (sid, r) "
        f"{probe}c.{request_id} = k.r OFFSET 0) AS c"
    )


def insert_and_derive(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    row: Sequence[Any],
    *,
    turn: int,
    call: int,
    request_id: str | None,
) -> tuple[list[tuple[Any, ...]], bool, dict[int, tuple[Any, dict[str, Any]]]]:
    """One record's `stored_call_keys`, a one-row INSERT and `derive_turns` in one statement: the
    stored calls of its turn and under its request id; its `row` inserted unless one of them
    holds its position (`turn`, `call`) or its `request_id` (exactly when `StoredKeys.decide`
    finds it new); and, when it went in, its turn re-derived from the turn's stored calls and
    the new one. Returns those stored keys, whether the row went in, and `derive_turns`' answer
    (empty when it did not). PostgreSQL only.

    Each was a round trip of its own (web CPU and a wake-up each, docs/performance.md P2).
    Reading and writing in one statement is safe because the caller holds the session's row
    lock (`session_state.lock_sessions`, an earlier statement): no other writer can store a
    call of this session meanwhile, and the statement's snapshot, taken once that lock is held,
    sees every call committed before it. The statement's queries share that snapshot, so the
    derivation reads the new call from the insert's RETURNING, beside the stored ones.
    """
    sql, params = insert_and_derive_statement(
        call_model, turn_model, row, turn=turn, call=call, request_id=request_id
    )
    return inserted_and_derived(call_model, turn_model, run(sql, params))


def insert_and_derive_statement(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    row: Sequence[Any],
    *,
    turn: int,
    call: int,
    request_id: str | None,
) -> tuple[str, list[Any]]:
    """`insert_and_derive`'s statement and values, not yet run (`inserted_and_derived` reads
    its answer). The caller must hold the session's lock when it runs (an earlier statement)."""
    session_id = row[0]
    sql, _, _ = _insert_and_derive_sql(call_model, turn_model)
    keys = [session_id, turn]
    return sql, [*keys, session_id, request_id, *row, turn, call, request_id, *keys, *keys, *keys]


def inserted_and_derived(
    call_model: type[models.Model],
    turn_model: type[models.Model],
    answer: list[tuple[Any, ...]],
) -> tuple[list[tuple[Any, ...]], bool, dict[int, tuple[Any, dict[str, Any]]]]:
    """`insert_and_derive`'s result from its statement's rows."""
    _, names, change = _insert_and_derive_sql(call_model, turn_model)
    (inserted, stored, *derived) = answer[0]
    # JSON has no bytes: the payload hash came as hex (`encode(…, 'hex')`), its stored form again
    found = (
        [(*s[:4], digest_from_text(s[4])) for s in json.loads(stored)] if stored is not None else []
    )
    rows = [derived] if inserted else []
    return found, bool(inserted), derived_turns(turn_model, rows, names, change)


@functools.cache
def _insert_and_derive_sql(
    call_model: type[models.Model], turn_model: type[models.Model]
) -> tuple[str, list[str], list[str]]:
    fields = [f for f in call_model._meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    table = quote(stored_table(call_model))
    by_attname = {f.attname: quote(f.column) for f in fields}
    session, turn, call, request_id, digest = (
        by_attname[name] for name in ("session_id", "turn", "call", "request_id", "payload_hash")
    )
    into, values = insert_parts(call_model)
    guard = (
        f"SELECT FROM stored AS s WHERE (s.{turn} = %s::integer AND s.{call} = %s::integer) "
        f"OR s.{request_id} = %s::text"
    )
    ctes, final, names, change = derive_turns_parts(
        turn_model, call_model, single=True, calls="src", only_if="EXISTS (SELECT FROM ins)"
    )
    stored_keys = ", ".join(f"s.{c}" for c in (session, turn, call, request_id))
    stored_keys += f", encode(s.{digest}, 'hex')"
    sql = (
        f"WITH stored AS ({_stored_call_keys_sql(call_model, single=True)}), "
        f"ins AS ({into} SELECT {values} WHERE NOT EXISTS ({guard}) RETURNING *), "
        # the turn's calls: those stored (this snapshot cannot see `ins`' row) and the new one
        f"src AS (SELECT * FROM {table} WHERE {session} = %s::bigint AND {turn} = %s::integer "
        "UNION ALL SELECT * FROM ins), "
        f"{ctes} "
        "SELECT (SELECT count(*) FROM ins), "
        f"(SELECT json_agg(json_build_array({stored_keys}))::text FROM stored AS s), x.* "
        f"FROM (SELECT) AS one LEFT JOIN ({final}) AS x ON true"
    )
    return sql, names, change
