"""COPY (`telemetry.ingest.new_rows.insert_rows`, PostgreSQL) stores a new call exactly as the ORM's
bulk_create does: every column, the JSON ones included (non-ASCII text, empty and null values);
and `copy_rows`, which names each column's type to COPY, stores what the untyped COPY stored;
and `json_text` is the text `json.dumps` gives."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import strategies as st

from telemetry.costing import CALL_COLUMNS, CallRow
from telemetry.ingest.new_rows import _copy_sql, bytea_text, copy_rows, insert_rows
from telemetry.ingest.statements import numbered, run
from telemetry.ingest.values import json_text
from telemetry.models import AgentSession, HourlyUsage, LLMCall

pytestmark = pytest.mark.django_db


def _call(session: AgentSession, turn: int, **json_values: Any) -> LLMCall:
    return LLMCall(
        session=session,
        turn=turn,
        call=1,
        request_id=None,
        model="claude-sonnet-4-5",
        provider="anthropic",
        uncached_input=12,
        cache_read=4_500,
        cache_write_5m=300,
        cache_write_1h=0,
        output=80,
        reasoning_output=None,
        reported_cache=True,
        context_tokens=4_812,
        request_chars=None,
        appended_chars=1_200,
        window_tokens=200_000,
        surface_version=3,
        at=datetime(2025, 6, 1, 12, 0, 7, 123456, tzinfo=UTC),
        cost_uncached_input=Decimal("0.000036"),
        cost_cache_read=Decimal("0.001350"),
        cost_cache_write_5m=Decimal("0.001125"),
        cost_cache_write_1h=Decimal("0"),
        cost_output=Decimal("0.001200"),
        cost_usd=Decimal("0.003711"),
        no_cache_cost_usd=Decimal("0.015636"),
        long_context=False,
        payload_hash=b"\xab" * 32,
        **json_values,
    )


@pytest.mark.parametrize(
    "json_values",
    [
        {
            "raw_usage": {"input_tokens": 12, "note": 'é \U0001f600 "q"'},
            "flags": [],
            "prefix": None,
        },
        {"raw_usage": {}, "flags": ["inferred_ttl", "x"], "prefix": [{"hash": "h", "chars": 3}]},
    ],
)
def test_a_copied_row_is_the_row_bulk_create_stores(make_agent, json_values):
    agent = make_agent()
    session = AgentSession.objects.create(profile=agent.key.profile, external_id="copy-check")
    insert_rows(LLMCall, [_call(session, 1, **json_values)])
    LLMCall.objects.bulk_create([_call(session, 2, **json_values)])
    copied, created = (
        {k: v for k, v in row.items() if k not in ("id", "turn", "received_at")}
        for row in LLMCall.objects.filter(session=session).order_by("turn").values()
    )
    assert copied == created
    assert copied["raw_usage"] == json_values["raw_usage"]


# --- copy_rows: each column dumped by its type (COPY's `set_types`) --------------------------

_ODD_TEXT = 'tab\there, a newline\nand \\ back "quoted" é \U0001f600 \u2028'


def _odd_rows(session_pk: int) -> list[CallRow]:
    from datetime import timedelta, timezone

    odd_zone = timezone(timedelta(hours=5, minutes=30))
    nested = {"a": {"b": [1, 2.5, None, True, "x\\y\n\u2028"], "c": {}}, "big": 10**30, "é": "😀"}
    common: dict[str, Any] = {
        "session_id": session_pk,
        "model": _ODD_TEXT,
        "provider": "",
        "uncached_input": 2**31 - 1,
        "cache_read": 0,
        "cache_write_5m": 1,
        "cache_write_1h": 2**31 - 1,
        "output": 7,
        "reasoning_output": None,
        "reported_cache": True,
        "context_tokens": 2**31 - 1,
        "request_chars": None,
        "appended_chars": 0,
        "window_tokens": 2**31 - 1,
        "surface_version": None,
        "long_context": False,
        "payload_hash": b"\xab" * 32,
        "received_at": datetime(2025, 6, 1, 12, 0, 8, 1, tzinfo=UTC),
    }
    return [
        CallRow(
            **common,
            turn=2**31 - 1,
            call=0,
            request_id=_ODD_TEXT,
            raw_usage=json_text(nested),
            flags=json_text([]),
            prefix=None,
            provider_miss_type=_ODD_TEXT[:64],
            provider_missed_tokens=2**31 - 1,
            provider_diagnostics=json_text({"anthropic": {"cache_miss_reason": None}}),
            at=datetime(2025, 6, 1, 12, 0, 7, 123456, tzinfo=odd_zone),
            cost_uncached_input=Decimal("12345678901.123456789"),
            cost_cache_read=Decimal("0.0000000005"),
            cost_cache_write_5m=Decimal("1E-9"),
            cost_cache_write_1h=Decimal("-0"),
            cost_output=Decimal("1.5E+3"),
            cost_usd=Decimal("0.1234567894999"),
            no_cache_cost_usd=3,  # an int where a Decimal is usual
        ),
        CallRow(
            **common,
            turn=0,
            call=2**31 - 1,
            request_id=None,
            raw_usage='{"é": "\U0001f600", "n": [[[]]], "s": "\\u00e9\\t"}',  # not ASCII-escaped
            flags=json_text(["inferred_ttl", "x"]),
            prefix=json_text(None),  # JSON null, not SQL NULL
            provider_miss_type=None,
            provider_missed_tokens=None,
            provider_diagnostics=json_text(None),
            at=datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            cost_uncached_input=None,
            cost_cache_read=None,
            cost_cache_write_5m=None,
            cost_cache_write_1h=None,
            cost_output=None,
            cost_usd=None,
            no_cache_cost_usd=None,
        ),
    ]


def _untyped_copy(rows: list[CallRow]) -> None:
    """COPY as `copy_rows` did before it gave the column types: a dumper per value's type."""
    sql = _copy_sql(LLMCall)[0]
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for row in rows:
            copy.write_row(row)


def _stored_text(session_pk: int) -> list[tuple[Any, ...]]:
    """Every column of the session's calls as PostgreSQL prints it, in insertion order."""
    columns = ", ".join(f'"{name}"::text' for name in CALL_COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM telemetry_llmcall WHERE session_id = %s ORDER BY id",
            [session_pk],
        )
        return list(cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's")
def test_typed_copy_stores_what_the_untyped_copy_stored(make_agent):
    agent = make_agent()
    typed, untyped = (
        AgentSession.objects.create(profile=agent.key.profile, external_id=name)
        for name in ("copy-typed", "copy-untyped")
    )
    copy_rows(LLMCall, _odd_rows(typed.pk))
    _untyped_copy(_odd_rows(untyped.pk))
    stored = _stored_text(typed.pk)
    assert len(stored) == 2
    session_column = CALL_COLUMNS.index("session_id")
    assert [row[session_column] for row in stored] == [str(typed.pk)] * 2
    assert [row[:session_column] + row[session_column + 1 :] for row in stored] == [
        row[:session_column] + row[session_column + 1 :] for row in _stored_text(untyped.pk)
    ]
    # and what was stored is what was meant, not only the same on both paths
    first = LLMCall.objects.filter(session=typed).order_by("id").first()
    assert first is not None
    assert first.request_id == _ODD_TEXT and first.model == _ODD_TEXT
    assert first.uncached_input == 2**31 - 1
    assert (
        first.usage_as_sent["big"] == 10**30 and first.usage_as_sent["a"]["b"][4] == "x\\y\n\u2028"
    )
    assert first.cost_uncached_input == Decimal("12345678901.123456789")
    assert first.cost_cache_read == Decimal("0.000000001")  # numeric(20, 9) rounds half up
    assert first.no_cache_cost_usd == Decimal(3)


# --- bytea_text: the text the driver's bytea dumper gives ------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's")
@given(st.binary(max_size=64))
@example(b"")
@example(b"\x00")
@example(b"\\")
@example(bytes(range(256)))
def test_bytea_text_is_the_text_the_drivers_bytea_dumper_gives(value):
    from psycopg import pq

    connection.ensure_connection()
    cursor = connection.connection.cursor()
    oid = cursor.adapters.types["bytea"].oid
    dumper = cursor.adapters.get_dumper_by_oid(oid, pq.Format.TEXT)(bytes, cursor)
    assert bytea_text(value).encode() == bytes(dumper.dump(value))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's")
def test_a_copied_payload_hash_is_stored_as_its_bytes(make_agent):
    session = AgentSession.objects.create(profile=make_agent().key.profile, external_id="hashes")
    digests = [bytes(range(32)), b"\x00" * 32, b"\\" * 32]
    rows = [
        row._replace(turn=i, request_id=f"h{i}", payload_hash=digest)
        for i, (row, digest) in enumerate(zip(_odd_rows(session.pk) * 2, digests, strict=False))
    ]
    copy_rows(LLMCall, rows)
    stored = LLMCall.objects.filter(session=session).order_by("turn")
    assert [bytes(c.payload_hash) for c in stored] == digests[: len(rows)]


# --- json_text: the text json.dumps gives -----------------------------------------------------

_text = st.text(
    st.characters(codec=None, categories=None)
    | st.sampled_from(['"', "\\", "\n", "\x00", "\x7f", "é", "\U0001f600", "\u2028"])
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=25,
)


@given(_json)
def test_json_text_is_what_json_dumps_gives(value):
    assert json_text(value) == json.dumps(value)


@given(st.dictionaries(_text, _json, max_size=6), st.dictionaries(_text, _json, max_size=6))
def test_json_text_carries_nothing_from_one_value_to_the_next(first, second):
    assert (json_text(first), json_text(second)) == (json.dumps(first), json.dumps(second))


_VALUES: dict[str, list[Any]] = {
    "DecimalField": [Decimal("0"), Decimal("1.234567"), Decimal("-0.000001"), Decimal("1E+3"), 3],
    "DateTimeField": [datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC), "2026-01-02T03:04:05Z"],
    "IntegerField": [0, -7, 2**40, True],
    "BigIntegerField": [0, 2**62],
    "PositiveIntegerField": [5],
    "CharField": ["", "claude-sonnet-4-5", "ünï"],
    "FloatField": [0.0, 0.123, 1],
    "BooleanField": [True, False],
    "ForeignKey": [1, 2**40, "7"],
}


@pytest.mark.parametrize("model", [AgentSession, LLMCall, HourlyUsage])
def test_prepare_gives_what_djangos_get_db_prep_save_gives(model: Any) -> None:
    """`values.prepare` skips Django's preparation only where it returns the value unchanged:
    every concrete field of the bulk-written models, with the value types the ingest hands it and
    others (strings, ints of a decimal field, a naive datetime), agrees with Django's, on
    PostgreSQL and on SQLite (where the hour rollups prepare their values too)."""
    from django.test.utils import override_settings

    from telemetry.ingest.values import prepare

    checked = 0
    for field in model._meta.concrete_fields:
        for value in [None, *_VALUES.get(field.get_internal_type(), [])]:
            if value is None and not field.null:
                continue
            expected = field.get_db_prep_save(value, connection)
            got = prepare(field, value)
            # (an int stays an int where Django wraps it in psycopg's Int4: the SQL casts it)
            assert got == expected and isinstance(expected, type(got)), (field.name, value)
            checked += 1
    assert checked > 40
    naive = datetime(2026, 1, 2, 3, 4, 5)  # noqa: DTZ001 (the point: Django makes it aware)
    field = AgentSession._meta.get_field("created_at")
    with pytest.warns(RuntimeWarning):
        assert prepare(field, naive) == field.get_db_prep_save(naive, connection)

    def outcome(fn: Any) -> Any:
        try:
            return fn()
        except ValueError as exc:  # SQLite refuses an aware datetime without USE_TZ
            return repr(exc)

    with override_settings(USE_TZ=False):
        aware = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        assert outcome(lambda: prepare(field, aware)) == outcome(
            lambda: field.get_db_prep_save(aware, connection)
        )
    with pytest.raises(Exception, match="decimal"):  # a NaN still gets Django's refusal
        prepare(LLMCall._meta.get_field("cost_usd"), Decimal("NaN"))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement upsert")
def test_lock_keys_creates_what_the_orm_creates_and_returns_existing_rows_as_stored(make_agent):
    """`upserts.lock_keys` (the session lock of every ingest) gives a new session every default
    the ORM gives it, and an existing one back as stored, its figures untouched."""
    from django.db import transaction
    from django.forms.models import model_to_dict

    from telemetry.ingest.upserts import lock_keys

    agent = make_agent()
    profile = agent.key.profile
    existing = AgentSession.objects.create(
        profile=profile,
        external_id="lk-old",
        model="claude-sonnet-4-5",
        turns_count=7,
        cost_usd=Decimal("1.250000000"),
        pressure=0.5,
    )
    orm = AgentSession.objects.create(profile=profile, external_id="lk-orm")
    with transaction.atomic():
        rows = lock_keys(
            AgentSession, [(profile.pk, "lk-new"), (profile.pk, "lk-old")], _SESSION_KEY
        )
    assert rows is not None
    new, old = rows
    ignore = {"id", "external_id", "created_at"}

    def fields(session: AgentSession) -> dict[str, Any]:
        return {k: v for k, v in model_to_dict(session).items() if k not in ignore}

    assert fields(new) == fields(orm) == fields(AgentSession.objects.get(external_id="lk-new"))
    assert new.created_at is not None and new.created_at >= orm.created_at
    assert old.pk == existing.pk and fields(old) == fields(existing)
    assert old.created_at == existing.created_at


_SESSION_KEY = ("profile_id", "external_id")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="data-modifying WITH")
def test_run_together_sends_the_writes_as_one_statement_and_applies_each(make_agent):
    """`statements.run_together` (the ingest's last two writes): every write applied, one
    statement counted, and a failing write leaves none of them behind."""
    from django.db import IntegrityError, transaction
    from django.test.utils import CaptureQueriesContext

    from telemetry.ingest.statements import run_together
    from telemetry.ingest.upserts import update_statement

    profile = make_agent().key.profile
    a, b = (AgentSession.objects.create(profile=profile, external_id=n) for n in ("rt-a", "rt-b"))
    a.turns_count, b.model = 3, "gpt-5"
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        run_together(
            [
                update_statement(AgentSession, [a], ["turns_count"]),
                None,
                update_statement(AgentSession, [b], ["model"]),
            ]
        )
    assert len(queries) == 1 and queries[0]["sql"].startswith("WITH ")
    assert AgentSession.objects.get(pk=a.pk).turns_count == 3
    assert AgentSession.objects.get(pk=b.pk).model == "gpt-5"
    a.turns_count, b.external_id = 4, "rt-a"  # b's new key is a's: a unique violation
    with pytest.raises(IntegrityError), transaction.atomic():
        run_together(
            [
                update_statement(AgentSession, [a], ["turns_count"]),
                update_statement(AgentSession, [b], ["external_id"]),
            ]
        )
    assert AgentSession.objects.get(pk=a.pk).turns_count == 3


_FRAGMENT = st.one_of(
    # our SQL texts: any character but the two that mean something here, and no surrogate
    # (a text must encode to UTF-8 to be sent at all)
    st.text(alphabet=st.characters(blacklist_characters="%$", codec="utf-8"), max_size=8),
    st.just("%s"),
    st.just("%%"),
)


@given(st.lists(_FRAGMENT, max_size=30))
def test_numbered_gives_postgresql_placeholders_in_order_and_unescapes_percent(parts):
    sql = "".join(parts)
    expected, count = [], 0
    for part in parts:
        if part == "%s":
            count += 1
            expected.append(f"${count}")
        else:
            expected.append("%" if part == "%%" else part)
    assert numbered(sql) == "".join(expected).encode()


@pytest.mark.parametrize("sql", ["SELECT %(name)s", "SELECT %b", "SELECT 5 %", "a %% %s %"])
def test_numbered_leaves_any_other_percent_form_to_psycopg(sql):
    assert numbered(sql) is None


def test_run_binds_many_values_and_keeps_a_literal_percent(make_agent):
    """Over 50 values and with `%%`: the texts psycopg re-parsed on every run."""
    if connection.vendor != "postgresql":
        pytest.skip("statements.run is PostgreSQL's")
    values = list(range(60))
    sql = "SELECT " + ", ".join(["%s::int"] * len(values)) + ", 'a%%b'"
    for prepare in (False, True, True):
        assert run(sql, values, prepare=prepare) == [(*values, "a%b")]
    named = run("SELECT %(x)s::int", {"x": 7}, prepare=False)  # type: ignore[arg-type]
    assert named == [(7,)]
