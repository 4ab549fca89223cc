"""Claude Code's untiered cache writes are billed as 5-minute writes under a 1h profile, on every
door that knows the agent, and `manage.py reprice_agent_writes` re-bills calls stored before
(issue 38, case 4). PostgreSQL and SQLite alike."""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F, Sum

from compaction.imports.store import import_file
from telemetry.models import AgentSession, HourlyUsage, LLMCall, Turn
from telemetry.rollups import rebuild_rollups
from tests.db.test_otlp import LOGS, post
from tests.db.test_otlp_sources import _logs
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db

# The call: Claude Code prices it at $0.027141 (5-minute writes, its default); billed at
# the 1h profile's tier it was $0.033864.
CLAUDE_CODE_PRICE = Decimal("0.027141")
ONE_HOUR_PRICE = Decimal("0.033864")
EVENT: dict[str, Any] = {
    "event.name": "api_request",
    "session.id": "cc-desk",
    "prompt.id": "prompt-1",
    "model": "claude-sonnet-4-5-20250929",
    "input_tokens": "0",
    "output_tokens": "540",
    "cache_read_tokens": "26120",
    "cache_creation_tokens": "2988",
    "cost_usd": "0.027141",
    "request_id": "req_desk_1",
}
USAGE: dict[str, Any] = {
    "input_tokens": 0,
    "cache_read_input_tokens": 26_120,
    "cache_creation_input_tokens": 2_988,
    "output_tokens": 540,
}


def _record(session: str, turn: int, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session,
        "turn": turn,
        "model": "claude-sonnet-4-5-20250929",
        "usage": dict(USAGE),
        "request_id": f"{session}-{turn}",
        **extra,
    }


def _ingest(agent: Any, *records: dict[str, Any]) -> list[str]:
    response = agent.post("/api/v1/telemetry", {"records": list(records)})
    assert response.status_code in (200, 201), response.content
    return [item["status"] for item in response.json()["items"]]


def test_a_claude_code_event_under_a_one_hour_profile_is_billed_as_claude_code_bills_it(
    make_agent: Any,
) -> None:
    agent = make_agent("desktop")
    assert agent.get("/api/v1/policy").json()["cache_ttl"] == "1h"

    response = post(agent, LOGS, _logs(EVENT))

    assert response.status_code == 200
    call = LLMCall.objects.get()
    assert (call.cache_write_5m, call.cache_write_1h) == (2_988, 0)
    assert call.cost_usd == CLAUDE_CODE_PRICE
    answer = agent.get("/api/v1/sessions/cc-desk/agent-cost").json()
    assert Decimal(answer["our_cost_usd"]) == Decimal(answer["agent_cost_usd"]) == CLAUDE_CODE_PRICE
    assert answer["differing_calls"] == []


def test_a_claude_code_event_that_splits_its_writes_keeps_its_one_hour_part(
    make_agent: Any,
) -> None:
    agent = make_agent("default")  # a 5m profile: the split, not a tier, places the writes
    split = {**EVENT, "cache_creation_tokens": "2988"}
    post(agent, LOGS, _logs(split))
    call = LLMCall.objects.get()
    assert call.cache_write_5m == 2_988
    # a JSON record that splits its writes keeps the split whoever made it
    _ingest(
        agent,
        _record(
            "split",
            0,
            agent="claude-code",
            usage={
                **USAGE,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 988,
                    "ephemeral_1h_input_tokens": 2_000,
                },
            },
        ),
    )
    split_call = LLMCall.objects.get(session__external_id="split")
    assert (split_call.cache_write_5m, split_call.cache_write_1h) == (988, 2_000)


def test_a_json_record_that_names_claude_code_is_billed_at_five_minutes(make_agent: Any) -> None:
    agent = make_agent("desktop")
    assert _ingest(agent, _record("named", 0, agent="claude-code"), _record("unnamed", 0)) == [
        "created",
        "created",
    ]
    named = LLMCall.objects.get(session__external_id="named")
    unnamed = LLMCall.objects.get(session__external_id="unnamed")
    assert (named.cache_write_5m, named.cost_usd) == (2_988, CLAUDE_CODE_PRICE)
    # an agent the console does not know writes at the profile's tier
    assert (unnamed.cache_write_1h, unnamed.cost_usd) == (2_988, ONE_HOUR_PRICE)
    # who reported a call is not part of it: a replay that names the agent is a duplicate
    assert _ingest(agent, _record("unnamed", 0, agent="claude-code")) == ["duplicate"]
    assert _ingest(agent, _record("named", 0)) == ["duplicate"]


def test_a_json_record_refuses_an_agent_name_it_cannot_store(make_agent: Any) -> None:
    agent = make_agent("desktop")
    response = agent.post("/api/v1/telemetry", {"records": [_record("x", 0, agent="a" * 65)]})
    item = response.json()["items"][0]
    assert (item["status"], item["field"]) == ("invalid", "records.0.agent")


def _flat_transcript() -> str:
    """The fixture's Claude Code session with its writes unsplit (older Claude Code versions)."""
    lines = []
    for line in fx.claude_code_session(truncated=False).splitlines():
        try:
            obj = json.loads(line)
        except ValueError:  # the fixture's broken line stays as it is
            lines.append(line)
            continue
        usage = obj.get("message", {}).get("usage") if isinstance(obj, dict) else None
        if isinstance(usage, dict):
            usage.pop("cache_creation", None)
        lines.append(json.dumps(obj))
    return "\n".join(lines) + "\n"


def _import(make_agent: Any, tmp_path: Path, text: str) -> AgentSession:
    profile = make_agent("desktop").key.profile
    path = tmp_path / f"{fx.SESSION}.jsonl"
    path.write_text(text)
    with path.open("rb") as handle:
        report = import_file(profile=profile, path=str(path), handle=handle)
    assert report.calls > 0
    return AgentSession.objects.get(profile=profile, external_id=fx.SESSION)


def test_an_imported_claude_code_transcript_bills_unsplit_writes_at_five_minutes(
    make_agent: Any, tmp_path: Path
) -> None:
    session = _import(make_agent, tmp_path, _flat_transcript())
    written = LLMCall.objects.filter(session=session).aggregate(
        five=Sum("cache_write_5m"), hour=Sum("cache_write_1h")
    )
    assert written["five"] > 0 and written["hour"] == 0


def _as_stored_before(calls: Any) -> None:
    """Put calls back as ingest stored them before it knew the agent: untiered writes at the
    profile's 1h tier, priced so (the rows, their turns, sessions and rollups)."""
    from telemetry.catalogue import OnceCatalogue
    from telemetry.derivation import derive_session_figures, rederive_turns
    from telemetry.session_state import write_figures

    calls.update(cache_write_1h=F("cache_write_5m") + F("cache_write_1h"), cache_write_5m=0)
    catalogue = OnceCatalogue()
    rows = list(calls)
    from telemetry.pricing import BILLED_FIGURES
    from telemetry.usage import normalize_usage

    for call in rows:
        pricer = catalogue.pricer(call.model)
        assert pricer is not None
        usage = normalize_usage(call.usage_as_sent, provider=call.provider, cache_ttl="1h")
        for name, value in zip(BILLED_FIGURES, pricer.values([usage]), strict=True):
            setattr(call, name, value)
    LLMCall.objects.bulk_update(rows, list(BILLED_FIGURES))
    touched = {(c.session_id, c.turn) for c in rows}
    rederive_turns(touched, write=touched)
    sessions = list(AgentSession.objects.filter(pk__in={c.session_id for c in rows}))
    derive_session_figures(sessions)
    write_figures(sessions)
    rebuild_rollups()


def _rollups() -> list[tuple[Any, ...]]:
    return sorted(
        HourlyUsage.objects.values_list(
            "profile_id", "model", "hour", "calls", "cache_write_5m", "cache_write_1h", "cost_usd"
        )
    )


def test_reprice_agent_writes_rebills_stored_claude_code_calls_once(
    make_agent: Any, tmp_path: Path
) -> None:
    desktop = make_agent("desktop")
    # Claude Code's OTLP event, a transcript import, and a call of another agent, all 1h
    post(desktop, LOGS, _logs(EVENT))
    imported = _import(make_agent, tmp_path, _flat_transcript())
    _ingest(desktop, _record("other-agent", 0))
    claude_code = LLMCall.objects.exclude(session__external_id="other-agent")
    _as_stored_before(claude_code)
    event_call = LLMCall.objects.get(session__external_id="cc-desk")
    assert (event_call.cache_write_1h, event_call.cost_usd) == (2_988, ONE_HOUR_PRICE)
    assert len(desktop.get("/api/v1/sessions/cc-desk/agent-cost").json()["differing_calls"]) == 1

    out = StringIO()
    call_command("reprice_agent_writes", stdout=out)

    repriced = claude_code.count()
    assert f"re-priced {repriced} " in out.getvalue()
    event_call.refresh_from_db()
    assert (event_call.cache_write_5m, event_call.cache_write_1h) == (2_988, 0)
    assert event_call.cost_usd == CLAUDE_CODE_PRICE
    assert desktop.get("/api/v1/sessions/cc-desk/agent-cost").json()["differing_calls"] == []
    assert LLMCall.objects.filter(session=imported, cache_write_1h__gt=0).count() == 0
    other = LLMCall.objects.get(session__external_id="other-agent")
    assert (other.cache_write_1h, other.cost_usd) == (2_988, ONE_HOUR_PRICE)
    # the turns and sessions say what their calls now say
    for session in AgentSession.objects.all():
        calls = LLMCall.objects.filter(session=session)
        assert session.cost_usd == calls.aggregate(s=Sum("cost_usd"))["s"]
        for turn in Turn.objects.filter(session=session):
            mine = calls.filter(turn=turn.turn).aggregate(
                cost=Sum("cost_usd"), five=Sum("cache_write_5m")
            )
            assert (turn.cost_usd, turn.cache_write_5m) == (mine["cost"], mine["five"])
    # the rollups are what a rebuild from the calls gives
    after = _rollups()
    rebuild_rollups()
    assert _rollups() == after

    again = StringIO()
    call_command("reprice_agent_writes", stdout=again)
    assert "re-priced 0 " in again.getvalue()
    assert _rollups() == after


def test_reprice_agent_writes_dry_run_changes_nothing(make_agent: Any) -> None:
    desktop = make_agent("desktop")
    post(desktop, LOGS, _logs(EVENT))
    _as_stored_before(LLMCall.objects.all())
    out = StringIO()
    call_command("reprice_agent_writes", "--dry-run", stdout=out)
    assert "re-priced 1 " in out.getvalue() and "nothing changed" in out.getvalue()
    assert LLMCall.objects.get().cost_usd == ONE_HOUR_PRICE
