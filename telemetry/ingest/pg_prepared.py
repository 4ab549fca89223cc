"""Run a prepared statement on a psycopg connection with less driver work than `Cursor.execute`.

Why: on a single-record ingest each of `telemetry.ingest.statements.run`'s statements cost
more Python through psycopg's cursor (its query conversion, prepare bookkeeping, result set-up
and row maker) than the exchange itself (make bench P2; `python -m bench.inprocess --split`;
docs/performance.md). `execute` dumps the values as text, sends them to a statement this module
has prepared on the connection, and loads the rows with the connection's own loaders (the same
values as a cursor's). When the connection is to start a transaction (not autocommit, idle),
its `BEGIN` goes in the same round trip as the statement (libpq's pipeline mode), and so does a
`COMMIT` when the caller asks for one: one exchange where the cursor took two or three.

Plain psycopg, no Django: `telemetry.ingest.statements.run` wraps it (errors, statement log).

The prepared names (`_prepared_<n>`) are this module's, never psycopg's (`_pg3_<n>`). psycopg
sends `DEALLOCATE ALL` after a rollback only when it has prepared statements of its own, which
it has not while every prepared statement goes through here (`statements.run` asks psycopg to
prepare nothing). Should a statement be missing all the same (a `DISCARD ALL` sent by someone
else, a pooler that changed server connections), `execute` forgets every name of that
connection; when the statement was the first of its transaction it rolls back, prepares it
again and retries once, otherwise it raises and the next call prepares afresh.

**An exception to psycopg's public API, pinned and tested.** Pipelined prepared statements
with the BEGIN and COMMIT in the same round trip are not reachable through `Connection.
pipeline()` and `Cursor.execute(prepare=True)` at the same driver cost (the cursor's
per-statement work is what this module saves, docs/performance.md P2), so it drives libpq
through psycopg's `pq` objects and uses the names in `BELOW_PUBLIC_API`, which psycopg does not
document as stable. psycopg is pinned to one version in both locks;
tests/unit/telemetry/test_pg_prepared_pin.py fails when the installed psycopg is another or a
name is gone, and tests/db/test_pg_prepared.py holds this module's answers, errors and
transactions to a cursor's. Upgrading psycopg means running both.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer
from psycopg.generators import execute as _execute
from psycopg.generators import fetch_many as _fetch_many
from psycopg.generators import send as _send

# psycopg's names below its public API that this module uses (see the module's note).
BELOW_PUBLIC_API = (
    "psycopg.generators.execute",
    "psycopg.generators.fetch_many",
    "psycopg.generators.send",
    "psycopg.adapt.Transformer",
    "psycopg.Connection._get_tx_start_command",
    "psycopg.pq.PGconn._encoding",
)

_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK)
_KEPT = 100
_IDLE = pq.TransactionStatus.IDLE


class _Prepared:
    """What this module keeps per connection: the names of its prepared texts, a transformer."""

    __slots__ = ("names", "transformer")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.names: dict[bytes, bytes] = {}
        self.transformer = Transformer(conn)


# Numbers of the process, never reused (also once a connection's `names` is cleared): a
# statement the server kept would otherwise collide with a new one of the same name.
_NUMBERS = itertools.count()


_STATE: weakref.WeakKeyDictionary[psycopg.Connection[Any], _Prepared] = weakref.WeakKeyDictionary()


def execute(
    conn: psycopg.Connection[Any],
    text: bytes,
    params: Sequence[Any],
    *,
    commit: bool = False,
    by_index: bool = False,
) -> pq.abc.PGresult:
    """Run `text` (PostgreSQL's own `$n` placeholders, each cast or typed by its context) with
    `params` as a prepared statement of `conn` and return its result (rows: `rows`).

    Starts the transaction first if `conn` is not in autocommit and idle (as psycopg would);
    with `commit` also commits it (an error leaves it aborted, for the caller to roll back).
    `by_index`: planned with sequential scans off (`SEQSCAN_OFF`). Raises psycopg's error of a
    failed statement.
    """
    return execute_all(conn, [(text, params)], commit=commit, by_index=by_index)[0]


# `by_index`: the statements are planned, and their plan kept, with sequential scans off, and
# the setting is reset right after them, in the same round trip. A prepared statement's generic
# plan is made once (at its sixth run) for the table sizes of that moment and kept until the
# table's statistics change: made while a table was a few pages (a new install), it scans the
# whole table per key as the table grows. With sequential scans off, each key's read is a
# probe of its index in every plan. Both commands are transactional: a failure in between
# aborts the transaction (the implicit one of the round trip too), which undoes the `SET`.
SEQSCAN_OFF = b"SET enable_seqscan = off"
SEQSCAN_RESET = b"RESET enable_seqscan"


def execute_all(
    conn: psycopg.Connection[Any],
    statements: Sequence[tuple[bytes, Sequence[Any]]],
    *,
    commit: bool = False,
    by_index: bool = False,
) -> list[pq.abc.PGresult]:
    """`execute` of several statements in one round trip, in order, each on its own snapshot
    (taken when the one before it has finished: a lock the first takes is held when the next
    reads). A failed statement aborts the ones after it; its error is raised."""
    state = _STATE.get(conn)
    if state is None:
        state = _STATE[conn] = _Prepared(conn)
    dump = state.transformer.dump_sequence
    dumped = [(text, dump(params, [PyFormat.TEXT] * len(params))) for text, params in statements]
    begin = not conn.autocommit and conn.pgconn.transaction_status == _IDLE
    with conn.lock:
        try:
            return _run(conn, state, dumped, begin=begin, commit=commit, by_index=by_index)
        except errors.InvalidSqlStatementName:
            state.names.clear()  # the server lost our statements: prepare them again
            if not begin:
                raise
        # The statement was its transaction's first: nothing else is lost by starting over.
        conn.pgconn.exec_(b"ROLLBACK")
        return _run(conn, state, dumped, begin=begin, commit=commit, by_index=by_index)


def rows(conn: psycopg.Connection[Any], result: pq.abc.PGresult) -> list[tuple[Any, ...]]:
    """The rows of `execute`'s result as tuples, each value loaded as a psycopg cursor would."""
    if result.status != pq.ExecStatus.TUPLES_OK or not result.ntuples:
        return []
    state = _STATE[conn]
    transformer = state.transformer
    transformer.set_pgresult(result)
    return transformer.load_rows(0, result.ntuples, tuple)


def deallocate_all(conn: psycopg.Connection[Any]) -> None:
    """Drop every prepared statement of `conn`, this module's and any other, and forget ours
    (a test that inspects `pg_prepared_statements` starts from none)."""
    with conn.lock:
        result = conn.pgconn.exec_(b"DEALLOCATE ALL")
        _check(conn.pgconn, result)
        _STATE.pop(conn, None)


def _run(
    conn: psycopg.Connection[Any],
    state: _Prepared,
    statements: Sequence[tuple[bytes, Sequence[Any]]],
    *,
    begin: bool,
    commit: bool,
    by_index: bool = False,
) -> list[pq.abc.PGresult]:
    pgconn = conn.pgconn
    names = [state.names.get(text) for text, _ in statements]
    if len(statements) == 1 and names[0] is not None and not (begin or commit or by_index):
        pgconn.send_query_prepared(names[0], statements[0][1])
        result: pq.abc.PGresult = conn.wait(_execute(pgconn))[-1]
        _check(pgconn, result)
        return [result]
    # In one pipeline, in order: BEGIN, sequential scans off, evictions, preparations, the
    # statements, their reset, COMMIT.
    commands: list[tuple[bytes, Callable[[], None]]] = []  # (what, send it)
    if begin:
        start = conn._get_tx_start_command()  # noqa: SLF001
        commands.append((b"begin", functools.partial(pgconn.send_query_params, start, None)))
    if by_index:
        off = functools.partial(pgconn.send_query_params, SEQSCAN_OFF, None)
        commands.append((b"set", off))
    unknown = {text: None for (text, _), name in zip(statements, names, strict=True) if not name}
    new = [(text, b"_prepared_%d" % next(_NUMBERS)) for text in unknown]
    # At most _KEPT per connection, as psycopg keeps its 100 latest: the oldest go first.
    kept = [text for text in state.names if text not in dict(statements)]
    evict = kept[: max(0, len(state.names) + len(new) - _KEPT)]
    for text in evict:
        deallocate = b"DEALLOCATE " + state.names[text]
        commands.append((b"evict", functools.partial(pgconn.send_query_params, deallocate, None)))
    for text, name in new:
        commands.append((b"prepare", functools.partial(pgconn.send_prepare, name, text)))
    fresh = dict(new)
    for text, values in statements:
        name = state.names.get(text) or fresh[text]
        commands.append((b"run", functools.partial(pgconn.send_query_prepared, name, values)))
    if by_index:
        reset = functools.partial(pgconn.send_query_params, SEQSCAN_RESET, None)
        commands.append((b"set", reset))
    if commit:
        commands.append((b"commit", functools.partial(pgconn.send_query_params, b"COMMIT", None)))
    results = conn.wait(_pipelined(pgconn, [send for _, send in commands]))
    # The names say what the server holds now, whatever became of the statements; then the
    # first failure is raised (a failed command aborts the ones after it).
    done = [
        result.status == pq.ExecStatus.COMMAND_OK
        for (what, _), result in zip(commands, results, strict=True)
        if what in (b"evict", b"prepare")
    ]
    for text, ok in zip(evict, done, strict=False):
        if ok:
            del state.names[text]
    for (text, name), ok in zip(new, done[len(evict) :], strict=True):
        if ok:
            state.names[text] = name
    for result in results:
        _check(pgconn, result)
    return [result for (what, _), result in zip(commands, results, strict=True) if what == b"run"]


def _pipelined(
    pgconn: pq.abc.PGconn, commands: Sequence[Callable[[], None]]
) -> Generator[Any, Any, list[pq.abc.PGresult]]:
    """Send `commands` in one pipeline and collect the last result of each; for `conn.wait`."""
    pgconn.enter_pipeline_mode()
    try:
        for send in commands:
            send()
        pgconn.pipeline_sync()
        yield from _send(pgconn)
        results = []
        for _ in commands:
            results.append((yield from _fetch_many(pgconn))[-1])
        synced = yield from _fetch_many(pgconn)
        assert synced and synced[0].status == pq.ExecStatus.PIPELINE_SYNC, synced
        return results
    finally:
        pgconn.exit_pipeline_mode()


def _check(pgconn: pq.abc.PGconn, result: pq.abc.PGresult) -> None:
    if result.status in _OK:
        return
    if result.status == pq.ExecStatus.PIPELINE_ABORTED:
        return  # skipped after an earlier command failed: that one is raised
    raise errors.error_from_result(result, encoding=pgconn._encoding)  # noqa: SLF001
