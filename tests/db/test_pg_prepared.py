"""`telemetry.ingest.pg_prepared`, through `telemetry.ingest.statements.run` (PostgreSQL): the rows a psycopg
cursor gives, the transaction started in the statement's round trip (a rollback undoes it),
the commit folded into the last statement only where `commit_with_last` allows it, errors as
Django's, and statements the server lost prepared again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, connection, connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry.ingest.statements import commit_with_last, run

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared path"),
]

_TABLE = "pg_prepared_probe"


@pytest.fixture
def probe(transactional_db: None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {_TABLE} (id bigint PRIMARY KEY, note text, "
            "amount numeric, at timestamptz, doc jsonb, tags text[])"
        )
        cursor.execute(f"TRUNCATE {_TABLE}")
    yield _TABLE
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {_TABLE}")


def _insert(key: int, note: str = "n", *, commit: bool = False) -> list[tuple[Any, ...]]:
    return run(
        f"INSERT INTO {_TABLE} (id, note) VALUES (%s::bigint, %s::text) RETURNING id, note",
        [key, note],
        commit=commit,
    )


def _stored() -> list[int]:
    """The probe's ids as another connection sees them (committed only)."""
    settings_dict = connection.settings_dict
    with psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"],
        host=settings_dict["HOST"],
        port=settings_dict["PORT"] or 5432,
        autocommit=True,
    ) as other:
        return [row[0] for row in other.execute(f"SELECT id FROM {_TABLE} ORDER BY id")]


_SELECT = (
    "SELECT %s::bigint, %s::text, %s::numeric, %s::timestamptz, %s::jsonb, %s::text[], "
    "%s::integer, %s::boolean"
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    # (not the types' least values: Django's client-side literal `-2147483648::integer` casts
    # before it negates, so the oracle itself fails on them)
    number=st.integers(-(2**63) + 1, 2**63 - 1),
    text=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")),
    amount=st.decimals(allow_nan=False, allow_infinity=False, places=12),
    seconds=st.integers(0, 2_000_000_000),
    offset=st.integers(-14 * 60, 14 * 60),
    tags=st.lists(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))),
    small=st.none() | st.integers(-(2**31) + 1, 2**31 - 1),
    flag=st.none() | st.booleans(),
)
def test_rows_are_what_a_psycopg_cursor_gives(
    db: None,
    number: int,
    text: str,
    amount: Decimal,
    seconds: int,
    offset: int,
    tags: list[str],
    small: int | None,
    flag: bool | None,
) -> None:
    at = datetime.fromtimestamp(seconds, timezone(timedelta(minutes=offset)))
    params: list[Any] = [number, text, amount, at, '{"k": [1, "\\u00e9", null]}', tags, small, flag]
    with connection.cursor() as cursor:
        cursor.execute(_SELECT, params)
        expected = cursor.fetchall()
    assert run(_SELECT, params) == expected
    assert run(_SELECT, params, prepare=False) == expected  # psycopg's own cursor path


def test_one_prepared_text_takes_values_of_any_size(db: None) -> None:
    """Prepared without parameter types (their casts type them): a small first value does
    not narrow the parameter for the next, larger one."""
    sql = "SELECT %s::bigint + 1"
    assert run(sql, [1]) == [(2,)]
    assert run(sql, [2**62]) == [(2**62 + 1,)]
    assert run(sql, [None]) == [(None,)]
    assert run("SELECT %s::bigint, %s::integer", [-(2**63), -(2**31)]) == [(-(2**63), -(2**31))]


def test_a_rollback_undoes_the_first_statement_of_a_transaction(probe: str) -> None:
    """The statement that opens the transaction travels with its BEGIN: without it the write
    would have been committed on its own and survive the rollback."""
    with pytest.raises(RuntimeError), transaction.atomic():
        assert _insert(1) == [(1, "n")]
        assert not connection.get_autocommit()
        raise RuntimeError("undo")
    assert _stored() == []
    with transaction.atomic():
        _insert(2)
        assert _stored() == []  # not committed before the block ends
    assert _stored() == [2]


def test_the_last_statement_commits_in_the_outermost_block_only(probe: str) -> None:
    hooks: list[str] = []
    with transaction.atomic():
        assert commit_with_last()
        with transaction.atomic():
            assert not commit_with_last()  # a savepoint: the outer block decides
        _insert(1)
        transaction.on_commit(lambda: hooks.append("ran"))
        _insert(2, commit=commit_with_last())
        assert _stored() == [1, 2]  # committed with the statement
        assert hooks == []  # Django's hooks still wait for the block's end
    assert hooks == ["ran"]
    assert _stored() == [1, 2]
    # A new block starts a new transaction: its own rollback undoes its writes.
    with pytest.raises(RuntimeError), transaction.atomic():
        _insert(3)
        raise RuntimeError("undo")
    assert _stored() == [1, 2]


def test_commit_with_last_is_off_outside_an_atomic_block_and_inside_a_tests_own(
    probe: str,
) -> None:
    assert not commit_with_last()
    with transaction.atomic(durable=False), transaction.atomic():
        assert not commit_with_last()


@pytest.mark.django_db
def test_inside_a_tests_transaction_nothing_commits_early(db: None) -> None:
    """In a test's transaction (an outer block) `commit_with_last` says no."""
    with transaction.atomic():
        assert not commit_with_last()


def test_an_error_comes_out_as_djangos_and_the_connection_goes_on(probe: str) -> None:
    with transaction.atomic():
        _insert(1)
    with pytest.raises(IntegrityError), transaction.atomic():
        _insert(1)  # the first statement of its transaction fails
    with pytest.raises(IntegrityError), transaction.atomic():
        _insert(5)
        _insert(1, commit=commit_with_last())  # a failed last statement commits nothing
    assert _stored() == [1]
    with transaction.atomic():
        _insert(2)
    assert _stored() == [1, 2]


def test_statements_the_server_lost_are_prepared_again(probe: str) -> None:
    with transaction.atomic():
        _insert(1)
    raw = connection.connection
    raw.execute("DEALLOCATE ALL")  # as a pooler or someone else's DISCARD ALL would
    with transaction.atomic():
        _insert(2)  # first of its transaction: rolled back, prepared again, retried
    assert _stored() == [1, 2]
    raw.execute("DEALLOCATE ALL")
    with pytest.raises(DatabaseError, match="does not exist"), transaction.atomic():
        run("SELECT 1", [])  # prepared anew: a text it had not prepared before
        _insert(3)  # not the first: its transaction is lost, so it raises
    with transaction.atomic():
        _insert(4)  # the next one prepares afresh
    assert _stored() == [1, 2, 4]


def test_a_new_connection_prepares_its_own(probe: str) -> None:
    with transaction.atomic():
        _insert(1)
    old = connection.connection
    connections["default"].close()
    with transaction.atomic():
        _insert(2)
    assert connection.connection is not old
    assert _stored() == [1, 2]


def test_the_time_comes_back_in_utc(db: None) -> None:
    at = datetime(2025, 6, 1, 12, 0, tzinfo=timezone(timedelta(hours=5)))
    [(value,)] = run("SELECT %s::timestamptz", [at])
    assert value == at and value.utcoffset() == UTC.utcoffset(None)


def test_a_connection_keeps_its_latest_statements_only(db: None, monkeypatch: Any) -> None:
    from telemetry.ingest import pg_prepared

    monkeypatch.setattr(pg_prepared, "_KEPT", 3)
    connection.ensure_connection()
    pg_prepared.deallocate_all(connection.connection)
    for n in range(6):
        assert run(f"SELECT %s::integer + {n}", [1]) == [(1 + n,)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements ORDER BY prepare_time")
        kept = [row[0] for row in cursor.fetchall()]
    assert kept == [f"SELECT $1::integer + {n}" for n in (3, 4, 5)]
    assert run("SELECT %s::integer + 0", [2]) == [(2,)]  # evicted: prepared again


def test_without_the_pipeline_psycopg_prepares_them_with_the_same_rows(
    probe: str, settings: Any
) -> None:
    """`DB_PIPELINE=false` (a pooler that does not pass pipelined messages): psycopg's cursor
    prepares and runs the same statements, and a rollback still undoes the first of them."""
    settings.DB_PIPELINE = False
    with pytest.raises(RuntimeError), transaction.atomic():
        assert _insert(1) == [(1, "n")]
        raise RuntimeError("undo")
    with transaction.atomic():
        assert _insert(2) == [(2, "n")]
        _insert(3, commit=commit_with_last())  # no pipeline: the block's own COMMIT
        assert _stored() == []
    assert _stored() == [2, 3]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"INSERT INTO {_TABLE}%"],
        )
        assert any(name.startswith("_pg3_") for (name,) in cursor.fetchall())


_BY_KEYS = (
    f"SELECT k.id, p.note FROM unnest(%s::bigint[]) AS k (id) CROSS JOIN LATERAL "
    f"(SELECT note FROM {_TABLE} AS p WHERE p.id = k.id OFFSET 0) AS p"
)


def _plan(raw: Any, keys: str) -> str:
    """The plan the connection keeps for `_BY_KEYS`, with sequential scans on."""
    from telemetry.ingest import pg_prepared
    from telemetry.ingest.statements import numbered

    text = numbered(_BY_KEYS)
    assert text is not None
    name = pg_prepared._STATE[raw].names[text].decode()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN EXECUTE {name}('{keys}')")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_statement_by_index_keeps_an_index_probe_planned_on_a_tiny_table(probe: str) -> None:
    """Planned on a table of one page, the generic plan (from the sixth run on) of a statement
    `by_index` still probes the primary key per key, so it stays a probe as the table grows;
    the same statement prepared without it is kept as a scan of the whole table per key."""
    with transaction.atomic():
        for key in range(10):
            _insert(key, f"n{key}")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {_TABLE}")
    # more keys than a generic plan assumes (ten), so PostgreSQL prefers it to planning anew
    keys = "{" + ",".join(str(n % 10) for n in range(50)) + "}"
    expected = [(n % 10, f"n{n % 10}") for n in range(50)]
    for _ in range(7):
        assert run(_BY_KEYS, [keys], by_index=True) == expected
    raw = connection.connection
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_seqscan")
        assert cursor.fetchone() == ("on",)  # reset after the statement
        cursor.execute(
            "SELECT generic_plans FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%unnest($1::bigint[])%"],
        )
        assert cursor.fetchone()[0] > 0
    assert "Index Scan" in _plan(raw, keys) and "Seq Scan" not in _plan(raw, keys)
    from telemetry.ingest import pg_prepared

    pg_prepared.deallocate_all(raw)
    for _ in range(7):
        run(_BY_KEYS, [keys])
    assert "Seq Scan" in _plan(raw, keys)


def test_a_failed_statement_by_index_leaves_sequential_scans_as_they_were(probe: str) -> None:
    with transaction.atomic():
        _insert(1)
    with pytest.raises(DatabaseError), transaction.atomic():
        run("SELECT 1 / (k.id - 1) FROM unnest(%s::bigint[]) AS k (id)", ["{1}"], by_index=True)
    run("SELECT 1 / (k.id - 1) FROM unnest(%s::bigint[]) AS k (id)", ["{2}"], by_index=True)
    with pytest.raises(DatabaseError):  # outside a transaction: the round trip's implicit one
        run("SELECT 1 / (k.id - 1) FROM unnest(%s::bigint[]) AS k (id)", ["{1}"], by_index=True)
    with connection.cursor() as cursor:
        cursor.execute("SHOW enable_seqscan")
        assert cursor.fetchone() == ("on",)
