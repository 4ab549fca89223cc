"""Turns derived by the database from the copied calls (PostgreSQL, `telemetry.ingest.turn_derivation.derive_turns`)
and hour rollups summed from the COPY rows equal what the Python path derives
(`telemetry.accounting.summarize_turn` over the stored calls, `telemetry.rollups.rebuild_rollups`),
for mixed batches: priced and unpriced models, calls with and without cache figures or reasoning,
calls out of order, across hours, and later batches adding to turns already stored.
On SQLite the same test holds the Python path to the same oracle."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from telemetry.accounting import summarize_turn
from telemetry.costing import CALL_COLUMNS
from telemetry.derivation import _CALL_FIELDS, _figures_of, turn_values
from telemetry.ingest import pg_prepared
from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentSession, HourlyUsage, LLMCall, Turn
from telemetry.packing import stored_table
from telemetry.rollups import rebuild_rollups
from telemetry.session_state import FIGURE_FIELDS

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 30, 9, 58, 0, tzinfo=UTC)
MODELS = ("claude-sonnet-4-5-20250929", "gpt-5", "acme-llm-9")  # the last is unpriced


def _usage(rng: random.Random, model: str) -> dict[str, Any]:
    if model == "gpt-5":
        usage: dict[str, Any] = {
            "prompt_tokens": rng.randint(1_000, 90_000),
            "completion_tokens": rng.randint(10, 3_000),
        }
        if rng.random() < 0.6:
            usage["prompt_tokens_details"] = {"cached_tokens": rng.randint(0, 900)}
        if rng.random() < 0.5:
            usage["completion_tokens_details"] = {"reasoning_tokens": rng.randint(0, 9)}
        return usage
    usage = {"input_tokens": rng.randint(1, 5_000), "output_tokens": rng.randint(1, 4_000)}
    if rng.random() < 0.7:  # else no cache figures: the call did not report its cache
        usage["cache_read_input_tokens"] = rng.randint(0, 150_000)
        usage["cache_creation_input_tokens"] = rng.randint(0, 9_000)
    return usage


def _records(rng: random.Random, calls: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    out = []
    for session, turn, call in calls:
        model = rng.choice(MODELS)
        record: dict[str, Any] = {
            "session_id": session,
            "turn": turn,
            "call": call,
            "model": model,
            "usage": _usage(rng, model),
            "at": (START + timedelta(seconds=rng.randint(0, 7_200))).isoformat(),
        }
        if model == "acme-llm-9":
            record["provider"] = "anthropic"
        if rng.random() < 0.5:
            record["appended_chars"] = rng.randint(0, 10_000)
        if rng.random() < 0.3:
            record["surface_version"] = rng.randint(1, 5)
        if rng.random() < 0.3:
            record["window_tokens"] = rng.choice((200_000, 400_000))
        out.append(record)
    return out


def _turn_rows() -> dict[tuple[int, int], tuple[Any, ...]]:
    return {
        (t[0], t[1]): t for t in Turn.objects.values_list("session_id", "turn", *_TURN_FIELDS[2:])
    }


_TURN_FIELDS = [f.attname for f in Turn._meta.concrete_fields if not f.primary_key]


def _expected_turns() -> dict[tuple[int, int], tuple[Any, ...]]:
    calls: dict[tuple[int, int], list[Any]] = {}
    for row in LLMCall.objects.values_list(*_CALL_FIELDS):
        calls.setdefault((row[0], row[1]), []).append(
            _figures_of(dict(zip(_CALL_FIELDS, row, strict=True)))
        )
    return {pair: turn_values(*pair, summarize_turn(found)) for pair, found in calls.items()}


def _same(stored: tuple[Any, ...], expected: tuple[Any, ...]) -> bool:
    # money compares by value (the column keeps nine places; a Python sum keeps its own exponent)
    return all(
        (a == b) if not isinstance(b, Decimal) else (a is not None and Decimal(a) == b)
        for a, b in zip(stored, expected, strict=True)
    )


def _hour_rows() -> list[tuple[Any, ...]]:
    return sorted(
        tuple(Decimal(v) if isinstance(v, Decimal) else v for v in row)
        for row in HourlyUsage.objects.values_list(
            *(f.attname for f in HourlyUsage._meta.concrete_fields if not f.primary_key)
        )
    )


@pytest.mark.parametrize("seed", range(4))
def test_turns_and_hours_derived_set_wise_equal_the_python_derivation(make_agent, seed):
    rng = random.Random(seed)
    profile = make_agent().key.profile
    positions = [(f"s{s}", t, c) for s in range(3) for t in range(6) for c in range(4)]
    rng.shuffle(positions)
    first, second = positions[:40], positions[40:]
    # the second batch adds calls to turns the first stored, and replays some of the first
    batches = [_records(rng, first), _records(rng, second)]
    batches[1] += rng.sample(batches[0], 5)
    for batch in batches:
        rng.shuffle(batch)
        result = store_records(profile=profile, raw_items=batch)
        bad = [i for i in result.items if i.status in ("invalid", "conflict")]
        assert not bad, bad[:3]
        assert len(result.items) == len(batch)
        stored, expected = _turn_rows(), _expected_turns()
        assert set(stored) == set(expected)
        for pair, row in expected.items():
            assert _same(stored[pair], row), (pair, stored[pair], row)
        kept = _hour_rows()
        rebuild_rollups()
        assert _hour_rows() == kept
    assert AgentSession.objects.filter(profile=profile).count() == 3
    assert LLMCall.objects.count() == len(positions)


def test_the_copy_columns_are_the_calls_fields_in_model_order():
    assert (
        tuple(f.attname for f in LLMCall._meta.concrete_fields if not f.primary_key) == CALL_COLUMNS
    )


def test_a_batch_counts_each_write_statement_once(make_agent):
    """Statement counts are what the bench reports (P2): each write is logged once."""
    profile = make_agent().key.profile
    batch = _records(random.Random(7), [("s", t, c) for t in range(3) for c in range(2)])
    with CaptureQueriesContext(connection) as queries:
        store_records(profile=profile, raw_items=batch)
    texts = [q["sql"] for q in queries.captured_queries]
    for table in (LLMCall, Turn, HourlyUsage):
        name = connection.ops.quote_name(stored_table(table))
        # (the turns' upsert is the data-modifying part of a WITH: matched inside the text)
        writes = [t for t in texts if f"INSERT INTO {name}" in t or t.startswith(f"COPY {name}")]
        assert len(writes) == 1, (table, writes)


@pytest.mark.parametrize("seed", range(2))
def test_calls_stored_one_by_one_equal_the_same_calls_copied_in_a_batch(make_agent, seed):
    """One record goes in by the single writer's statement (`call_keys.insert_and_derive`), a
    batch by COPY: the same records give the same call, turn and session rows either way."""
    rng = random.Random(seed)
    one_by_one, batched = make_agent("solo-a").key.profile, make_agent("solo-b").key.profile
    positions = [(f"s{s}", t, c) for s in range(2) for t in range(4) for c in range(3)]
    rng.shuffle(positions)
    records = _records(rng, positions)
    records[0]["usage"]["note"] = 'é \U0001f600 "q" \\ \u2028'  # kept verbatim in raw_usage
    for record in records:
        assert (
            store_records(profile=one_by_one, raw_items=[record], batch=False).items[0].status
            == "created"
        )
    result = store_records(profile=batched, raw_items=records)
    assert [i.status for i in result.items] == ["created"] * len(records)

    def rows(model: type[Any], profile: Any, skip: tuple[str, ...]) -> dict[Any, Any]:
        found = {}
        for row in model.objects.filter(session__profile=profile).values():
            session = AgentSession.objects.get(pk=row["session_id"]).external_id
            key = (session, row["turn"], row.get("call"))
            found[key] = {k: v for k, v in row.items() if k not in skip}
        return found

    skip = ("id", "session_id", "received_at")
    assert rows(LLMCall, one_by_one, skip) == rows(LLMCall, batched, skip)
    assert rows(Turn, one_by_one, skip) == rows(Turn, batched, skip)
    session_fields = (
        "turns_count",
        "calls_count",
        "peak_context_tokens",
        "cost_usd",
        "cache_read_tokens",
        "cache_denominator_tokens",
        "last_seen_at",
        "model",
    )
    for external_id in ("s0", "s1"):
        a, b = (
            AgentSession.objects.filter(profile=p, external_id=external_id)
            .values(*session_fields)
            .get()
            for p in (one_by_one, batched)
        )
        assert a == b


# Every stored figure: those the totals set, and the projection and window in force, which
# the re-derivation below leaves as stored (so they must agree too).
_TOTAL_FIELDS = tuple(FIGURE_FIELDS)


@pytest.mark.parametrize("seed", range(4))
def test_session_figures_brought_forward_equal_them_re_derived_from_all_turns(make_agent, seed):
    """Ingest moves a session's totals forward from the turns it touched
    (`telemetry.session_totals`); after every submission they equal a re-derivation from all
    the session's turns: single records and batches, calls mostly in order with some late
    ones (to earlier turns, and to the last turn), replays, several sessions at once."""
    from telemetry.derivation import derive_session_figures

    rng = random.Random(seed)
    profile = make_agent().key.profile
    positions = [(f"s{s}", t, c) for s in range(3) for t in range(10) for c in range(3)]
    for i in range(len(positions) - 1):  # mostly in order, some late
        if rng.random() < 0.25:
            j = min(len(positions) - 1, i + rng.randint(1, 6))
            positions[i], positions[j] = positions[j], positions[i]
    records = _records(rng, positions)
    start = 0
    while start < len(records):
        size = rng.choice((1, 1, 1, 2, 5, 12))
        chunk = records[start : start + size]
        start += size
        if rng.random() < 0.3:
            chunk = [*chunk, rng.choice(records[:start])]  # a replay: a duplicate
        result = store_records(profile=profile, raw_items=chunk, batch=len(chunk) > 1)
        assert {i.status for i in result.items} <= {"created", "duplicate"}, result.items
        stored = sorted(AgentSession.objects.filter(profile=profile), key=lambda s: s.pk)
        fresh = sorted(AgentSession.objects.filter(profile=profile), key=lambda s: s.pk)
        derive_session_figures(fresh)
        for kept, derived in zip(stored, fresh, strict=True):
            assert {f: getattr(kept, f) for f in _TOTAL_FIELDS} == {
                f: getattr(derived, f) for f in _TOTAL_FIELDS
            }, (kept.external_id, start)


def _prepared() -> dict[str, int]:
    """The connection's prepared statements: text -> times run (PostgreSQL 14+ counts plans)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans + custom_plans FROM pg_prepared_statements")
        return {text: int(runs) for text, runs in cursor.fetchall()}


def test_a_single_records_statements_are_prepared_a_batchs_are_not(make_agent, settings):
    """`statements.run`: a request's few-row statements are prepared once per connection; a batch's
    many keys are planned for their values each time (generic plans of 1,000-key arrays cost
    more); with DB_PREPARED_STATEMENTS off nothing is prepared."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    profile = make_agent().key.profile
    rng = random.Random(3)
    turns = connection.ops.quote_name(stored_table(Turn))
    calls = connection.ops.quote_name(stored_table(LLMCall))
    # (the test connection may hold statements earlier tests prepared: compare runs before/after)
    pg_prepared.deallocate_all(connection.connection)
    settings.DB_PREPARED_STATEMENTS = False
    before = _prepared()
    store_records(profile=profile, raw_items=_records(rng, [("one", 0, 0)]), batch=False)
    assert _prepared() == before

    settings.DB_PREPARED_STATEMENTS = True
    store_records(profile=profile, raw_items=_records(rng, [("one", 1, 0)]), batch=False)
    prepared = _prepared()
    derive = [text for text in prepared if f"INSERT INTO {turns}" in text]
    assert len(derive) == 1 and prepared[derive[0]] == before.get(derive[0], 0) + 1, prepared
    # the call goes in with the read of its stored keys (`call_keys.insert_and_derive`)
    assert any(f"INSERT INTO {calls}" in text and "UNION" in text for text in prepared)

    batch = _records(rng, [("many", t, 0) for t in range(20)])  # 20 turns: more than a few
    store_records(profile=profile, raw_items=batch)
    assert _prepared()[derive[0]] == prepared[derive[0]]  # the same text ran unprepared


def test_a_single_records_generic_plans_probe_the_indexes_whatever_the_tables_size(make_agent):
    """After five runs a prepared statement may run a generic plan, made without its values and
    then kept by the connection. The single-record statements must probe the unique indexes in
    it even when planned over empty tables (a new install, the bench's first seconds): with the
    batch's array forms, PostgreSQL assumed ten keys and hash-joined them to a scan of the whole
    calls table, and a connection kept scanning as the table grew (make bench P2)."""
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    profile = make_agent().key.profile
    rng = random.Random(5)
    connection.ensure_connection()
    pg_prepared.deallocate_all(connection.connection)  # none an earlier test left
    for turn in range(2):
        records = _records(rng, [("plans", turn, 0)])
        store_records(profile=profile, raw_items=records, batch=False)
    calls = connection.ops.quote_name(stored_table(LLMCall))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements"
        )
        prepared = cursor.fetchall()  # this test's, and any an earlier test left on the connection
        reads = [text for _, text, _ in prepared if f"FROM {calls}" in text or "JOIN" in text]
        assert any("UNION" in t for t in reads) and any(" old AS (" in t for t in reads), reads
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        for name, text, count in prepared:
            cursor.execute(f"EXPLAIN EXECUTE {name}({', '.join(['NULL'] * count)})")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Seq Scan" not in plan, (text, plan)
            if text in reads:
                assert "Index Cond" in plan, (text, plan)
            if "UNION" in text:  # the stored keys: each probe on its own index, by all its keys
                assert "call_unique_position" in plan and "call_unique_request_id" in plan, plan
                # no index probe filters what it found (all its keys are in its condition);
                # the single record's statement filters and joins only what it has just read
                # or written itself (CTEs of a row or two: the stored keys, the turn's calls)
                nodes = [line for line in plan.splitlines() if "->" in line or "Filter" in line]
                for node, line in zip(nodes, nodes[1:], strict=False):
                    if "Filter" in line and "One-Time Filter" not in line:
                        assert "Index" not in node, plan


def test_a_batchs_turn_derivation_probes_the_calls_by_key_whatever_the_statistics(make_agent):
    """A batch's turn derivation is planned for its values, but against statistics that do not
    know the rows it has just copied: with a join of its keys to the calls, PostgreSQL sorted
    and merged a scan of the whole calls table on every batch (its backend CPU grew with the
    table, make bench P1). Each key now reads its own calls and its last call through the unique
    index (LATERAL), and the row estimates stay the key count."""
    if connection.vendor != "postgresql":
        pytest.skip("the set-wise derivation is PostgreSQL's")
    from telemetry.ingest.turn_derivation import _derive_turns_sql
    from telemetry.ingest.values import pairs_arrays

    profile = make_agent().key.profile
    rng = random.Random(7)
    store_records(profile=profile, raw_items=_records(rng, [("big", t, 0) for t in range(300)]))
    session = AgentSession.objects.get(external_id="big")
    sql, _, _ = _derive_turns_sql(Turn, LLMCall, single=False)
    arrays = pairs_arrays([(session.pk, t) for t in range(300)])
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", [*arrays, *arrays])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan" not in plan, plan
    assert "Index Scan Backward using call_unique_position" in plan, plan  # the last call


def test_a_batchs_stored_keys_are_read_by_their_pairs_not_by_whole_sessions(make_agent):
    """The idempotency read of a batch probes each (session, turn) and (session, request id)
    pair through its unique index: read by session and filtered, a batch into a long session
    read every call the session held (and could be planned as a scan of the whole table)."""
    if connection.vendor != "postgresql":
        pytest.skip("the raw idempotency read is PostgreSQL's")
    from telemetry.idempotency import StoredKeys
    from telemetry.ingest.call_keys import _stored_call_keys_sql

    profile = make_agent().key.profile
    rng = random.Random(9)
    store_records(profile=profile, raw_items=_records(rng, [("long", t, 0) for t in range(200)]))
    session = AgentSession.objects.get(external_id="long")
    keys = StoredKeys({(session.pk, t) for t in range(150, 250)}, {(session.pk, "req-x")})
    assert keys.stored_turns == {(session.pk, t) for t in range(150, 200)}
    with connection.cursor() as cursor:
        arrays: list[Any] = [[session.pk] * 100, list(range(150, 250)), [session.pk], ["req-x"]]
        cursor.execute(f"EXPLAIN {_stored_call_keys_sql(LLMCall, single=False)}", arrays)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan on telemetry_llmcall" not in plan and "Filter" not in plan, plan
    assert "call_unique_position" in plan and "call_unique_request_id" in plan, plan


@pytest.mark.parametrize("seed", range(3))
def test_a_single_record_goes_in_exactly_when_its_stored_keys_find_it_new(make_agent, seed):
    """On PostgreSQL a single record's row goes in with the read of its stored keys, guarded
    by them (`call_keys.insert_and_derive`, one statement). Records drawn to collide by
    position and by request id, in two sessions: each one's status is what `StoredKeys`, read
    apart just before, decides, and a call is added exactly when it is created."""
    from telemetry.idempotency import StoredKeys, payload_hash
    from telemetry.ingest.call_keys import _stored_call_keys_sql
    from telemetry.schemas import RecordIn

    profile = make_agent().key.profile
    rng = random.Random(seed)
    for _ in range(60):
        session, turn, call = rng.choice("ab"), rng.randrange(3), rng.randrange(2)
        record = _records(rng, [(session, turn, call)])[0]
        record["usage"] = {"input_tokens": rng.choice((10, 20)), "output_tokens": 1}
        record.pop("at")
        if rng.random() < 0.6:
            record["request_id"] = f"req-{rng.randrange(4)}"
        stored_session = AgentSession.objects.filter(profile=profile, external_id=session).first()
        expected = "created"
        if stored_session is not None:
            parsed = RecordIn.model_validate(record)
            requests = [(stored_session.pk, parsed.request_id)] if parsed.request_id else []
            keys = StoredKeys([(stored_session.pk, turn)], requests)
            expected = keys.decide(stored_session.pk, parsed, payload_hash(parsed))[0]
        before = LLMCall.objects.count()
        with CaptureQueriesContext(connection) as queries:
            result = store_records(profile=profile, raw_items=[record], batch=False)
        assert result.items[0].status == expected, (record, result.items[0])
        assert LLMCall.objects.count() == before + (expected == "created")
        if connection.vendor == "postgresql":
            calls = connection.ops.quote_name(stored_table(LLMCall))
            read = _stored_call_keys_sql(LLMCall, single=True)
            texts = [q["sql"] for q in queries.captured_queries if read in q["sql"]]
            # the stored keys are read once, in the insert's statement (no round trip of their own)
            assert len(texts) == 1 and f"INSERT INTO {calls}" in texts[0], texts


@pytest.mark.parametrize(
    "request_id",
    [
        'msg_01 "quoted" \\ back\\slash',
        "é \U0001f600 \u2028 \u2029 \t tab",
        "r" * 200,  # the longest the schema takes
        "   ",
        "0",
    ],
)
def test_a_single_records_stored_request_id_comes_back_exactly(make_agent, request_id):
    """The single record's statement hands its stored keys back as JSON text: a request id of
    quotes, escapes, astral and line-separator characters, or the longest allowed, must come
    back as stored, or a replay is taken for new (a unique violation) or a conflict."""
    profile = make_agent().key.profile
    record = {
        "session_id": "odd",
        "turn": 3,
        "model": "claude-sonnet-4-5-20250929",
        "request_id": request_id,
        "usage": {"input_tokens": 10, "output_tokens": 2},
        "at": "2026-11-30T10:00:00Z",
    }

    def status(**changes: Any) -> str:
        one = {**record, **changes}
        return store_records(profile=profile, raw_items=[one], batch=False).items[0].status

    assert status() == "created"
    assert status() == "duplicate"
    assert status(turn=4) == "conflict"  # the same request id, other content
    assert status(usage={"input_tokens": 11, "output_tokens": 2}) == "conflict"
    assert LLMCall.objects.get().request_id == request_id
