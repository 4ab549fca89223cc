"""Export sessions as JSON lines and import them back (issue 35, item 3): an export of a period,
deleted and re-imported into an empty database, gives the same sessions (their metadata, title
and operator tags too), overview and costs; an
import into sessions that still exist adds only the rows they lack and no figure twice; the API
streams, needs a key and answers 4xx for what it cannot do."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compaction import session_export
from compaction.models import (
    Archive,
    CompactionOperation,
    CompactionRun,
    LogMessage,
    Surface,
    SurfaceVersion,
)
from compaction.session_export import export_lines, sessions_to_export
from compaction.session_import import import_lines
from console.overview import load_overview
from context_core.export_lines import FORMAT_VERSION, ExportLineError
from telemetry.events import record_context_event
from telemetry.models import (
    AgentSession,
    ContextEvent,
    HourlyUsage,
    LLMCall,
    SessionTag,
    Turn,
    TurnKey,
)
from telemetry.rollups import SUM_FIELDS, rebuild_rollups
from telemetry.session_tags import add_tags, set_tags, tags_of
from telemetry.tag_rules import MAX_TAGS_PER_SESSION
from tests.db.conftest import Agent
from tests.db.stored import session_rows
from tests.db.test_console_views import report
from tests.support import append_body

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"


def records(
    session_id: str, turns: int, *, start: datetime, calls: int = 2
) -> list[dict[str, Any]]:
    """`turns` turns of `calls` calls each, 23 minutes apart: they fall in many hours."""
    return [
        {
            "session_id": session_id,
            "turn": t,
            "call": c,
            "request_id": f"{session_id}-{t}-{c}",
            "model": SONNET,
            "at": (start + timedelta(minutes=23 * t + c)).isoformat(),
            "usage": {
                "input_tokens": 400 + 7 * t,
                "cache_creation_input_tokens": 900 + c,
                "cache_read_input_tokens": 15_000 + 1_000 * t,
                "output_tokens": 250 + c,
            },
        }
        for t in range(turns)
        for c in range(calls)
    ]


@pytest.fixture
def history(compactor: Agent) -> list[str]:
    """Two sessions of the default profile: one with a transcript, a compaction and an agent's
    compaction event, one with calls only; and a session of another profile."""
    now = timezone.now()
    assert compactor.post("/api/v1/sessions/run-1/messages", append_body(12)).status_code == 201
    run1_records = records("run-1", 9, start=now - timedelta(hours=20))
    run1_records[0]["metadata"] = {"title": "Refactor billing", "user": "ana", "branch": "main"}
    report(compactor.key, run1_records)
    add_tags(session_id=AgentSession.objects.get(external_id="run-1").pk, texts=["Needs Review"])
    add_tags(session_id=AgentSession.objects.get(external_id="run-1").pk, texts=["billing,q3"])
    assert compactor.post("/api/v1/sessions/run-1/compact").status_code == 200
    run1 = AgentSession.objects.get(external_id="run-1")
    record_context_event(
        run1,
        kind="compaction",
        origin="agent",
        source="claude-code",
        source_key="cc-1",
        at=now - timedelta(hours=3),
        turn=4,
        call=LLMCall.objects.get(session=run1, turn=4, call=1),
        tokens_before=50_000,
        tokens_after=12_000,
        summary="what happened so far",
        detail={"trigger": "auto"},
    )
    report(compactor.key, records("calls-only", 5, start=now - timedelta(hours=6), calls=1))
    from telemetry.keys import create_agent_key

    other = create_agent_key(profile_name="fleet").key
    report(other, records("fleet-1", 3, start=now - timedelta(hours=2)))
    return ["run-1", "calls-only", "fleet-1"]


def everything() -> str:
    return "".join(export_lines(sessions_to_export()))


def session_state(external_id: str) -> dict[str, Any]:
    """What the console shows of a session, without database ids and import clocks."""
    session = AgentSession.objects.get(external_id=external_id)
    rows = session_rows(session, skip={"relief_requested_at"})
    rows["created_at"] = session.created_at
    rows["tags"] = tags_of([session.pk]).get(session.pk, ())
    rows["log"] = list(
        LogMessage.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "format", "role", "raw", "raw_hash", "chars", "tool_chars", "bound_cap")
    )
    rows["surface"] = list(
        Surface.objects.filter(session=session).values_list("version", "body", "etag", "seqs")
    )
    rows["versions"] = list(
        SurfaceVersion.objects.filter(session=session)
        .order_by("version")
        .values_list("version", "log_messages", "operations", "chars")
    )
    rows["runs"] = list(
        CompactionRun.objects.filter(session=session)
        .order_by("pk")
        .values_list(
            "mode",
            "status",
            "action",
            "tokens_before",
            "tokens_after",
            "started_at",
            "finished_at",
            "rewrite_premium_usd",
            "archived",
        )
    )
    rows["operations"] = list(
        CompactionOperation.objects.filter(session=session)
        .order_by("pk")
        .values_list("run__started_at", "base_version", "position", "kind", "data")
    )
    rows["events"] = list(
        ContextEvent.objects.filter(session=session)
        .order_by("pk")
        .values_list(
            "kind",
            "origin",
            "source_key",
            "turn",
            "call__turn",
            "call__call",
            "tokens_before",
            "tokens_after",
            "summary",
            "detail",
            "at",
        )
    )
    rows["turn_keys"] = list(
        TurnKey.objects.filter(session=session).order_by("turn").values_list("key", "turn")
    )
    return rows


def hour_rows() -> list[tuple[Any, ...]]:
    """The hour rollups by (profile, model, hour), stripes summed."""
    return list(
        HourlyUsage.objects.values("profile__name", "model", "hour")
        .annotate(**{f"s_{name}": Sum(name) for name in SUM_FIELDS})
        .order_by("profile__name", "model", "hour")
        .values_list("profile__name", "model", "hour", *(f"s_{n}" for n in SUM_FIELDS))
    )


def overview_figures(profile: str = "") -> dict[str, Any]:
    o = load_overview("7d", profile)
    return {
        "buckets": [
            (b.start, b.calls, b.read, b.denominator, b.reported, b.costs, b.saved)
            for b in o.buckets
        ],
        "lines": [(p.name, p.calls, p.cost, p.saved, p.hit, p.bands) for p in o.lines],
        "bands": o.bands,
        "origins": o.origin_totals,
        "freed": o.freed,
        "failures": o.archive_failures,
        "top_cost": [s.external_id for s in o.top_cost],
        "top_pressure": [(s.external_id, band) for s, band in o.top_pressure],
    }


def figures(names: Iterable[str]) -> dict[str, Any]:
    return {
        "sessions": {name: session_state(name) for name in names},
        "hours": hour_rows(),
        "overview": overview_figures(),
        "default": overview_figures("default"),
        "cost": AgentSession.objects.aggregate(Sum("cost_usd"), Sum("no_cache_cost_usd")),
    }


def delete_sessions(**which: Any) -> None:
    # operations first: their runs are PROTECTed from a session's cascade
    CompactionOperation.objects.filter(**{f"session__{k}": v for k, v in which.items()}).delete()
    AgentSession.objects.filter(**which).delete()


def empty_the_database() -> None:
    delete_sessions()
    HourlyUsage.objects.all().delete()
    assert not LLMCall.objects.exists() and not LogMessage.objects.exists()


# --- the round trip ----------------------------------------------------------------------------


def test_an_export_imported_into_an_empty_database_gives_the_same_figures(history):
    before = figures(history)
    run1 = before["sessions"]["run-1"]
    assert run1["tags"] == ("billing", "needs-review", "q3")
    assert run1["session"]["title"] == "Refactor billing" and run1["session"]["meta_user"] == "ana"
    assert run1["session"]["metadata_doors"]["branch"] == "record"
    assert before["sessions"]["run-1"]["runs"] and before["sessions"]["run-1"]["events"]
    assert before["sessions"]["run-1"]["operations"] and before["sessions"]["run-1"]["log"]
    assert (
        before["overview"]["origins"]["agent"] == 1 and before["overview"]["origins"]["manual"] == 1
    )
    exported = everything()

    empty_the_database()
    assert overview_figures()["lines"] != before["overview"]["lines"]
    result = import_lines(io.StringIO(exported))

    assert (result.created, result.existing) == (3, 0)
    assert result.inserted["call"] == 9 * 2 + 5 + 3 * 2
    assert result.inserted["tag"] == 3
    assert figures(history) == before
    # the rollups are the calls' sums, as a rebuild from the restored calls gives them
    rebuild_rollups()
    assert hour_rows() == before["hours"]


def test_a_restored_session_still_works_it_takes_new_calls_and_messages(history, compactor):
    exported = everything()
    empty_the_database()
    import_lines(io.StringIO(exported))
    session = AgentSession.objects.get(external_id="run-1")
    assert session.relief_requested_at is None
    calls = session.calls_count
    report(compactor.key, records("run-1", 11, start=timezone.now() - timedelta(hours=1))[-2:])
    session.refresh_from_db()
    assert session.calls_count == calls + 2
    surface = compactor.get("/api/v1/sessions/run-1/surface").json()
    assert surface["surface_version"] == Surface.objects.get(session=session).version


def test_importing_into_sessions_that_exist_adds_only_missing_rows_and_no_figure_twice(history):
    exported = everything()
    before = figures(history)
    # a retention took the older calls and turns of run-1; rollups and session totals stay
    session = AgentSession.objects.get(external_id="run-1")
    cutoff = timezone.now() - timedelta(hours=10)
    LLMCall.objects.filter(session=session, at__lt=cutoff).delete()
    Turn.objects.filter(session=session, last_at__lt=cutoff).delete()
    taken = sum(1 for s in before["sessions"]["run-1"]["calls"] if s["at"] < cutoff)
    assert taken > 0
    # an operator changed run-1's tags since the export: the import adds the ones it lost
    set_tags(session_id=session.pk, texts=["q3", "later"])

    result = import_lines(io.StringIO(exported))

    assert (result.created, result.existing) == (0, 3)
    assert result.inserted["call"] == taken
    assert tags_of([session.pk])[session.pk] == ("billing", "later", "needs-review", "q3")
    assert (result.inserted["tag"], result.present["tag"]) == (2, 1)
    set_tags(session_id=session.pk, texts=before["sessions"]["run-1"]["tags"])
    assert figures(history) == before

    again = import_lines(io.StringIO(exported))
    assert sum(again.inserted.values()) == 0 and sum(again.present.values()) > 0
    assert figures(history) == before


def test_a_row_written_twice_in_the_file_refuses_that_session_and_keeps_the_ones_before(history):
    exported = everything().splitlines(keepends=True)
    empty_the_database()
    first_call = next(i for i, line in enumerate(exported) if '"kind":"call"' in line)
    doubled = [*exported[: first_call + 1], exported[first_call], *exported[first_call + 1 :]]
    # the fleet session first, so one session is imported before the refused one
    fleet = [i for i, line in enumerate(exported) if '"external_id":"fleet-1"' in line][0]
    reordered = exported[fleet:] + doubled[: fleet + 1] if fleet > first_call else doubled
    with pytest.raises(ExportLineError, match="a call row appears twice"):
        import_lines(reordered)
    assert list(AgentSession.objects.values_list("external_id", flat=True)) == ["fleet-1"]
    assert HourlyUsage.objects.aggregate(n=Sum("calls"))["n"] == 3 * 2


def session_line(v: int = 2, **row: Any) -> str:
    return json.dumps(
        {"v": v, "kind": "session", "row": {"profile": "default", "external_id": "x", **row}}
    )


@pytest.mark.parametrize("digest", ["ab" * 31, "zz" * 32, 7, None])
def test_a_call_line_whose_payload_hash_is_not_a_sha256_in_hex_is_refused_by_name(agent, digest):
    call = {"v": 2, "kind": "call", "row": {"turn": 1, "call": 0, "payload_hash": digest}}
    with pytest.raises(ExportLineError, match="line 2: payload_hash: not a SHA-256 in hex"):
        import_lines([session_line(), json.dumps(call)])


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"output": 2**31}, f"line 2: output: must be in [{-(2**31)}, {2**31 - 1}], got {2**31}"),
        ({"turn": 2**31}, "line 2: turn: must be in [0, "),
        (
            {
                "uncached_input": 2**30,
                "cache_read": 2**30,
                "cache_write_5m": 0,
                "cache_write_1h": 0,
            },
            f"line 2: context_tokens: the input buckets add up to {2**31}",
        ),
    ],
)
def test_a_call_line_whose_counts_a_row_cannot_store_is_refused_by_name(agent, counts, message):
    call = {"v": 2, "kind": "call", "row": {"turn": 1, "call": 0, **counts}}
    with pytest.raises(ExportLineError, match=re.escape(message)):
        import_lines([session_line(), json.dumps(call)])


def test_a_version_1_session_line_without_tags_still_imports_and_a_second_import_changes_nothing(
    agent,
):
    old = session_line(v=1, title="From before tags", metadata={"title": "From before tags"})
    assert import_lines([old]).created == 1
    session = AgentSession.objects.get(external_id="x")
    assert session.title == "From before tags" and tags_of([session.pk]) == {}
    tagged = session_line(tags=["red", "blue"])
    assert import_lines([tagged]).existing == 1
    assert import_lines([tagged]).existing == 1
    assert tags_of([session.pk]) == {session.pk: ("blue", "red")}
    assert SessionTag.objects.filter(session=session).count() == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"v":1,"kind":"call","row":{"turn":1}}', "line 1: a call line before any session line"),
        ('{"v":9,"kind":"session","row":{}}', "line 1: format version 9"),
        ('{"v":1,"kind":"session","row":{"external_id":"x"}}', "profile, external_id"),
        (session_line(profile="Bad Name!"), "profile:"),
        (session_line(colour=1), "colour: not a column of a session line"),
        (session_line(cost_usd="abc"), "cost_usd:"),
        (session_line(created_at="noon"), "created_at:"),
        (session_line(tags="red"), "line 1: tags: must be an array of tag strings"),
        (session_line(tags=[1]), "line 1: tags: must be an array"),
        (session_line(tags=["-bad"]), "line 1: tags: '-bad' must be letters"),
        (
            session_line(tags=[f"t{i}" for i in range(MAX_TAGS_PER_SESSION + 1)]),
            "line 1: tags: at most",
        ),
        (session_line(metadata=["a"]), "line 1: metadata: must be an object"),
        (session_line(retired_totals=[1]), "line 1: retired_totals: must be an object"),
        (
            session_line(retired_totals={"calls": "3"}),
            "retired_totals: calls: must be a whole number from 0",
        ),
        (
            session_line(retired_totals={"turns": -1}),
            "retired_totals: turns: must be a whole number from 0",
        ),
        (session_line(retired_totals={"cost": "abc"}), "retired_totals: cost: must be a decimal"),
        (session_line(retired_totals={"cost": "NaN"}), "retired_totals: cost: must be a decimal"),
        (session_line(retired_totals={"last_seen": "noon"}), "retired_totals: last_seen:"),
        (
            session_line(retired_totals={"last_seen": "2026-12-01T10:00:00"}),
            "retired_totals: last_seen: must be an ISO 8601 time with its offset",
        ),
        (session_line(retired_totals={"colour": 1}), "retired_totals: colour: not a total"),
    ],
)
def test_a_bad_line_is_refused_by_its_number_and_its_column(agent, line, message):
    with pytest.raises(ExportLineError, match=message):
        import_lines([line])
    assert not AgentSession.objects.filter(external_id="x").exists()


# --- the commands ------------------------------------------------------------------------------


def test_export_sessions_before_takes_the_sessions_active_before_whole_and_import_restores_them(
    history, tmp_path
):
    path = tmp_path / "old.jsonl"
    cutoff = timezone.now() - timedelta(hours=5)
    before = figures(history)
    call_command(
        "export_sessions",
        "--profile",
        "default",
        "--before",
        cutoff.isoformat(),
        "--output",
        str(path),
    )
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    exported = [line["row"]["external_id"] for line in lines if line["kind"] == "session"]
    assert exported == ["run-1", "calls-only"]  # fleet-1 is another profile, and recent
    assert sum(1 for line in lines if line["kind"] == "call") == 9 * 2 + 5

    delete_sessions(external_id__in=exported)
    HourlyUsage.objects.filter(profile__name="default").delete()
    out = io.StringIO()
    call_command("import_sessions", str(path), stdout=out)
    assert "2 sessions created, 0 existing" in out.getvalue()
    assert figures(history) == before


def test_the_commands_refuse_what_they_cannot_read(tmp_path, agent):
    with pytest.raises(CommandError, match="--before"):
        call_command("export_sessions", "--before", "yesterday")
    with pytest.raises(CommandError, match="--before"):
        call_command("export_sessions", "--before", "2026-01-01T00:00:00")  # no offset
    with pytest.raises(CommandError, match="--profile: no profile named 'nobody'"):
        call_command("export_sessions", "--profile", "nobody")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(session_line(external_id="a") + "\nnot json\n")
    with pytest.raises(CommandError, match=r"line 2: not JSON .*the sessions before it"):
        call_command("import_sessions", str(bad))
    with pytest.raises(CommandError, match="missing.jsonl"):
        call_command("import_sessions", str(tmp_path / "missing.jsonl"))


# --- the API -----------------------------------------------------------------------------------


def consumed(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]


def test_the_session_export_streams_in_chunks_it_never_holds_the_session(agent, monkeypatch):
    monkeypatch.setattr(session_export, "CHUNK_ROWS", 40)
    report(agent.key, records("long", 150, start=timezone.now() - timedelta(days=2), calls=2))

    response = agent.get("/api/v1/sessions/long/export")

    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    assert 'filename="session-long.jsonl"' in response["Content-Disposition"]
    chunks: Iterator[bytes] = iter(response.streaming_content)
    assert not isinstance(response.streaming_content, list | tuple)
    with CaptureQueriesContext(connection) as queries:
        first = next(chunks)
        second = next(chunks)
    # the session line (its row and its tags), then the first chunk of rows: three reads, not
    # the 300 calls
    assert len(queries) <= 4
    assert first.count(b"\n") == 1 and second.count(b"\n") <= 40
    sizes = [chunk.count(b"\n") for chunk in chunks]
    assert max(sizes) <= 40 and len(sizes) >= 300 // 40
    full = consumed(agent.get("/api/v1/sessions/long/export"))
    calls = [(line["row"]["turn"], line["row"]["call"]) for line in full if line["kind"] == "call"]
    assert calls == [(t, c) for t in range(150) for c in range(2)]  # each once, in order


def test_the_bulk_export_is_the_keys_profiles_sessions_before_a_time(history, compactor, agent):
    cutoff = (timezone.now() - timedelta(hours=5)).astimezone(UTC)
    response = agent.get("/api/v1/export/sessions", data={"before": cutoff.isoformat()})
    assert response.status_code == 200 and response.streaming
    found = [line["row"]["external_id"] for line in consumed(response) if line["kind"] == "session"]
    assert found == ["run-1", "calls-only"]
    everything_of_default = consumed(
        agent.get("/api/v1/export/sessions", data={"profile": "default"})
    )
    assert [x["row"]["external_id"] for x in everything_of_default if x["kind"] == "session"] == [
        "run-1",
        "calls-only",
    ]
    long_ago = datetime(2000, 1, 1, tzinfo=UTC).isoformat()
    assert consumed(agent.get("/api/v1/export/sessions", data={"before": long_ago})) == []


def test_the_export_needs_a_key_and_shows_nothing_of_another_profile(history, agent, outsider):
    assert agent.client.get("/api/v1/sessions/run-1/export").status_code == 401
    assert agent.client.get("/api/v1/export/sessions").status_code == 401
    assert outsider.get("/api/v1/sessions/run-1/export").status_code == 404
    assert consumed(outsider.get("/api/v1/export/sessions")) == []
    refused = outsider.get("/api/v1/export/sessions", data={"profile": "default"})
    assert refused.status_code == 403 and "outsiders" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"before": "yesterday"}, "before"),
        ({"before": "1767225600"}, "before"),  # a number is not taken as a Unix time
        ({"before": "2026-01-01T00:00:00"}, "before"),
        ({"befor": "2026-01-01T00:00:00Z"}, "befor"),  # misspelt: never "export everything"
    ],
)
def test_a_bad_before_is_a_422_naming_it(agent, query, field):
    response = agent.get("/api/v1/export/sessions", data=query)
    assert response.status_code == 422
    assert response.json()["detail"].startswith(f"{field}:")


def test_an_unknown_session_is_a_404(agent):
    assert agent.get("/api/v1/sessions/nobody/export").status_code == 404


def test_the_export_leaves_out_archives_and_money_stays_exact(history):
    lines = [json.loads(line) for line in everything().splitlines()]
    assert Archive.objects.exists()
    assert {line["kind"] for line in lines} == {
        "session",
        "turn_key",
        "call",
        "turn",
        "context_event",
        "log",
        "surface_version",
        "surface",
        "run",
        "operation",
    } - {"turn_key"}  # ingest over our API numbers turns itself: no on-ramp keys here
    line = next(line for line in lines if line["kind"] == "call")
    call = line["row"]
    stored = LLMCall.objects.get(
        session__external_id=call_session(lines, line), turn=call["turn"], call=call["call"]
    )
    assert Decimal(call["cost_usd"]) == stored.cost_usd and isinstance(call["cost_usd"], str)
    # the payload hash is stored as its 32 bytes and written as the 64 hex digits it always was
    assert re.fullmatch(r"[0-9a-f]{64}", call["payload_hash"])
    assert call["payload_hash"] == bytes(stored.payload_hash).hex()
    # every amount is written as the API writes money (`money_text`): 9 places, never "0E-9"
    amounts = [
        value
        for line in lines
        for name, value in line["row"].items()
        if (name.startswith("cost_") or name.endswith("_usd")) and value is not None
    ]
    assert "0.000000000" in amounts
    assert all(re.fullmatch(r"-?[0-9]+\.[0-9]{9}", value) for value in amounts), amounts
    assert all(line["v"] == FORMAT_VERSION for line in lines)


def call_session(lines: list[dict[str, Any]], target: dict[str, Any]) -> str:
    current = ""
    for line in lines:
        if line["kind"] == "session":
            current = line["row"]["external_id"]
        if line is target:
            return current
    raise AssertionError("not in the lines")


@pytest.mark.parametrize(
    "before",
    ["0066-09-13T01:59:35.965+22:09", "2999-01-01T23:30:00-23:59", "0001-01-01T00:30:00+01:00"],
)
def test_any_valid_offset_is_read_as_its_instant_or_refused_by_name(history, agent, before):
    """ISO offsets go to ±23:59; PostgreSQL's stop at ±15:59 (it once answered +22:09 with a
    500). The route reads the instant in UTC; one before year 1 in UTC is a 422 naming it."""
    response = agent.get("/api/v1/export/sessions", data={"before": before})
    if before.startswith("0001"):
        assert response.status_code == 422 and response.json()["detail"].startswith("before:")
        return
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    if before.startswith("2999"):
        assert body.count('"kind":"session"') >= 1  # the history's sessions began before it
    else:
        assert body == ""
