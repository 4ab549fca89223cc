"""Importing Claude Code sessions and Codex rollouts (issue 11), on PostgreSQL and SQLite."""

from __future__ import annotations

import io
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from compaction.imports.store import import_file
from compaction.models import (
    CompactionOperation,
    LogMessage,
    SessionLink,
    TranscriptImport,
)
from compaction.transcripts import surface_at
from telemetry.catalogue import load_catalogue
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall
from telemetry.pricing import call_cost, find_price
from telemetry.usage import normalize_usage
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile(make_agent: Any) -> AgentProfile:
    agent = make_agent("imports")
    found: AgentProfile = agent.key.profile
    return found


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run_import(profile: AgentProfile, path: Path, **kwargs: Any) -> Any:
    with path.open("rb") as handle:
        return import_file(profile=profile, path=str(path), handle=handle, **kwargs)


def snapshot(profile: AgentProfile) -> dict[str, Any]:
    sessions = AgentSession.objects.filter(profile=profile)
    return {
        "sessions": sorted(
            sessions.values_list("external_id", "calls_count", "cost_usd", "surface_version")
        ),
        "log": LogMessage.objects.filter(session__profile=profile).count(),
        "calls": LLMCall.objects.filter(session__profile=profile).count(),
        "events": ContextEvent.objects.filter(session__profile=profile).count(),
        "ops": CompactionOperation.objects.filter(session__profile=profile).count(),
    }


def test_claude_code_session_imports_with_its_facts(profile, tmp_path):
    path = write(tmp_path, f"proj/{fx.SESSION}.jsonl", fx.claude_code_session())
    report = run_import(profile, path)
    assert report.status == "imported"
    assert report.format == "claude-code"
    assert report.calls == 4 and report.compactions == 1
    reasons = [reason for _, reason in report.skipped]
    assert any("unknown type 'weird-new-type'" in r for r in reasons)
    assert any("not valid JSON" in r for r in reasons)
    assert any("truncated last line" in r for r in reasons)
    session = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    calls = LLMCall.objects.filter(session=session).order_by("turn", "call")
    assert [(c.turn, c.call, c.request_id) for c in calls] == [
        (0, 0, "req_1"),
        (0, 1, "msg_2"),
        (1, 0, "req_3"),
    ]
    assert calls[0].output == 40  # the last line's usage, not the sum of the lines
    # The inline sidechain is a child session linked to its parent.
    link = SessionLink.objects.get(parent=session)
    assert link.relation == "sidechain"
    assert link.child.calls_count == 1


def test_cost_cache_hit_and_peak_equal_the_sums_over_unique_requests(profile, tmp_path):
    path = write(tmp_path, f"{fx.SESSION}.jsonl", fx.claude_code_session())
    run_import(profile, path)
    session = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    catalogue = load_catalogue()
    price = find_price(fx.MODEL, catalogue)
    assert price is not None
    usages = [normalize_usage(u, provider="anthropic") for u in fx.CLAUDE_REQUESTS.values()]
    assert session.cost_usd == sum((call_cost(u, price).total for u in usages), Decimal(0))
    read = sum(u.cache_read for u in usages)
    assert session.cache_hit_ratio == pytest.approx(read / sum(u.context_tokens for u in usages))
    assert session.peak_context_tokens == max(u.context_tokens for u in usages)


def test_codex_token_sums_equal_the_final_total(profile, tmp_path):
    path = write(
        tmp_path,
        f"2026/11/30/rollout-2026-11-30T11-00-00-{fx.CODEX_SESSION}.jsonl",
        fx.codex_rollout(),
    )
    report = run_import(profile, path)
    assert report.format == "codex" and report.calls == 3 and report.compactions == 1
    session = AgentSession.objects.get(profile=profile, external_id=fx.CODEX_SESSION)
    calls = LLMCall.objects.filter(session=session)
    final = {k: sum(c[k] for c in fx.CODEX_CALLS) for k in fx.CODEX_CALLS[0]}
    assert sum(c.uncached_input + c.cache_read for c in calls) == final["input_tokens"]
    assert sum(c.cache_read for c in calls) == final["cached_input_tokens"]
    assert sum(c.output for c in calls) == final["output_tokens"]
    assert sum(c.reasoning_output or 0 for c in calls) == final["reasoning_output_tokens"]
    assert session.window_tokens == 272000
    assert session.model == "gpt-5-codex"


def test_the_agent_compaction_is_in_the_history_and_the_surface_after_it(profile, tmp_path):
    path = write(tmp_path, f"{fx.SESSION}.jsonl", fx.claude_code_session())
    run_import(profile, path)
    session = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    event = ContextEvent.objects.get(session=session)
    assert (event.kind, event.origin, event.source, event.trigger) == (
        "compaction",
        "agent",
        "claude-code",
        "auto",
    )
    assert event.tokens_before == 150000
    assert event.tokens_after == 20 + 3000 + 50
    assert event.summary.startswith("This session is being continued")
    op = CompactionOperation.objects.get(session=session)
    assert op.kind == "agent" and op.run is None
    # The call after the compaction names a surface version that starts at the summary.
    after = LLMCall.objects.get(session=session, request_id="req_3")
    surface = surface_at(session, after.surface_version or 0)
    assert surface is not None
    assert surface.messages[0].text.startswith("This session is being continued")
    before = LLMCall.objects.get(session=session, request_id="msg_2")
    earlier = surface_at(session, before.surface_version or 0)
    assert earlier is not None and earlier.messages[0].text == "Why does the build fail?"
    # The original messages stay in the log.
    assert LogMessage.objects.filter(session=session, seq=0).exists()


def test_codex_compacted_is_recorded_with_its_replacement_history(profile, tmp_path):
    path = write(tmp_path, "rollout.jsonl", fx.codex_rollout())
    run_import(profile, path)
    session = AgentSession.objects.get(profile=profile, external_id=fx.CODEX_SESSION)
    event = ContextEvent.objects.get(session=session)
    assert event.source == "codex" and event.summary == "Summary: the tests were fixed."
    assert len(event.detail["replacement_history"]) == 2
    assert event.tokens_after == 3000
    last = LLMCall.objects.get(session=session, turn=1, call=0)
    surface = surface_at(session, last.surface_version or 0)
    assert surface is not None
    assert [m.text for m in surface.messages] == [
        "You are Codex.",
        "fix the tests",
        "Summary: the tests were fixed.",
        "now run lint",
    ]


def test_a_rollout_without_usage_imports_messages_only(profile, tmp_path):
    path = write(tmp_path, "rollout-no-usage.jsonl", fx.codex_without_usage())
    report = run_import(profile, path)
    assert report.calls == 0 and report.messages == 2
    session = AgentSession.objects.get(profile=profile, external_id="no-usage-0000")
    assert session.calls_count == 0


def test_subagent_files_are_child_sessions_of_the_folder_session(profile, tmp_path):
    write(tmp_path, f"proj/{fx.SESSION}.jsonl", fx.claude_code_session())
    write(tmp_path, f"proj/{fx.SESSION}/subagents/agent-a1b2c3.jsonl", fx.subagent_file())
    write(tmp_path, f"proj/{fx.SESSION}/subagents/agent-acompact-77.jsonl", fx.subagent_file())
    call_command(
        "import_transcripts",
        str(tmp_path / "proj"),
        "--profile",
        profile.name,
        stdout=io.StringIO(),
    )
    parent = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    relations = dict(
        SessionLink.objects.filter(parent=parent).values_list("child__external_id", "relation")
    )
    assert relations[f"{fx.SESSION}:agent-a1b2c3"] == "subagent"
    assert relations[f"{fx.SESSION}:agent-acompact-77"] == "compaction"


def test_reimport_changes_nothing_and_growth_imports_only_new_lines(profile, tmp_path):
    text = fx.claude_code_session(truncated=False)
    lines = text.splitlines(keepends=True)
    half = len(lines) // 2
    path = write(tmp_path, f"{fx.SESSION}.jsonl", "".join(lines[:half]))
    run_import(profile, path, final=False)
    path.write_text(text)
    grown = run_import(profile, path)
    assert grown.lines == len(lines) - half
    after_growth = snapshot(profile)
    again = run_import(profile, path)
    assert again.status == "unchanged" and again.lines == 0
    assert snapshot(profile) == after_growth
    # Same numbers as importing the whole file at once into another profile.
    other = AgentProfile.objects.create(name="imports-whole")
    whole = tmp_path / "whole" / f"{fx.SESSION}.jsonl"
    whole.parent.mkdir()
    whole.write_text(text)
    run_import(other, whole)
    mine, theirs = snapshot(profile), snapshot(other)
    assert {k: v for k, v in mine.items() if k != "sessions"} == {
        k: v for k, v in theirs.items() if k != "sessions"
    }
    assert [s[:3] for s in mine["sessions"]] == [s[:3] for s in theirs["sessions"]]


def test_a_truncated_last_line_is_imported_once_complete(profile, tmp_path):
    text = fx.claude_code_session(truncated=False)
    cut = text.rindex('{"type": "assistant"')
    path = write(tmp_path, f"{fx.SESSION}.jsonl", text[: cut + 40])
    report = run_import(profile, path, final=False)
    assert any("truncated last line" in reason for _, reason in report.skipped)
    path.write_text(text)
    run_import(profile, path)
    assert LLMCall.objects.filter(session__profile=profile, request_id="req_s").exists()


def test_a_rewritten_file_is_reported_and_never_counted_twice(profile, tmp_path):
    path = write(tmp_path, f"{fx.SESSION}.jsonl", fx.claude_code_session())
    run_import(profile, path)
    before = snapshot(profile)
    path.write_text(fx.claude_code_session().replace("Reading the log.", "Reading the logs"))
    report = run_import(profile, path)
    assert report.status == "rewritten"
    assert snapshot(profile) == before
    assert TranscriptImport.objects.get(profile=profile).rewritten_at is not None


def test_another_format_is_refused_by_the_command(profile, tmp_path):
    path = write(tmp_path, "notes.jsonl", '{"role": "user", "content": "hi"}\n')
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_transcripts", str(path), "--profile", profile.name, stdout=out)
    assert "not a Claude Code session or a Codex rollout" in out.getvalue()
    assert snapshot(profile)["log"] == 0


def test_the_command_prints_a_report_per_file(profile, tmp_path):
    path = write(tmp_path, f"{fx.SESSION}.jsonl", fx.claude_code_session())
    out = io.StringIO()
    call_command("import_transcripts", str(path), "--profile", profile.name, "--json", stdout=out)
    report = json.loads(out.getvalue().splitlines()[0])
    assert report["calls"] == 4 and report["compactions"] == 1
    assert {"line", "reason"} <= set(report["skipped"][0])


def test_post_imports_takes_a_file_as_the_body(make_agent):
    agent = make_agent("remote")
    body = fx.codex_rollout()
    response = agent.client.post(
        "/api/v1/imports?name=rollout-a.jsonl",
        body,
        content_type="application/x-ndjson",
        headers=agent.headers(),
    )
    assert response.status_code == 200, response.content
    assert response.json()["calls"] == 3
    again = agent.client.post(
        "/api/v1/imports?name=rollout-a.jsonl",
        body,
        content_type="application/x-ndjson",
        headers=agent.headers(),
    )
    assert again.json()["status"] == "unchanged"
    wrong = agent.client.post(
        "/api/v1/imports?name=x.jsonl",
        '{"a": 1}\n',
        content_type="application/x-ndjson",
        headers=agent.headers(),
    )
    assert wrong.status_code == 422 and wrong.json()["field"] == "body"
    changed = agent.client.post(
        "/api/v1/imports?name=rollout-a.jsonl",
        body.replace("fix the tests", "fix the tasks"),
        content_type="application/x-ndjson",
        headers=agent.headers(),
    )
    assert changed.status_code == 409


def test_the_session_page_shows_the_agent_compaction_and_the_surface_after_it(
    profile, tmp_path, client, django_user_model, settings
):
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    write(tmp_path, f"proj/{fx.SESSION}.jsonl", fx.claude_code_session())
    write(tmp_path, f"proj/{fx.SESSION}/subagents/agent-a1b2c3.jsonl", fx.subagent_file())
    call_command(
        "import_transcripts",
        str(tmp_path / "proj"),
        "--profile",
        profile.name,
        stdout=io.StringIO(),
    )
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123456789")
    client.force_login(user)
    session = AgentSession.objects.get(profile=profile, external_id=fx.SESSION)
    page = client.get(f"/sessions/{session.pk}/").content.decode()
    # the agent's compaction is listed once, with the other context events, not again in the
    # imported panel (which names the file, the parent and the children)
    assert page.count("This session is being continued") == 2  # the row's preview and its text
    assert "Agent and provider compactions" in page
    assert "<h3>The agent's own compactions</h3>" not in page
    assert "This session is being continued" in page
    assert "?surface_turn=1" in page
    assert f"{fx.SESSION}:agent-a1b2c3" in page
    # the surface loads on demand (htmx), a long one in parts: ask for all of it
    after = client.get(
        f"/sessions/{session.pk}/?surface_turn=1&surface_all=1",
        headers={"HX-Request": "true", "HX-Target": "surface"},
    ).content.decode()
    surface = after[after.index('id="surface"') :]
    assert surface.index("This session is being continued") < surface.index("Add the dependency")
    assert "Why does the build fail?" not in surface
    child = SessionLink.objects.get(parent=session, relation="subagent").child
    child_page = client.get(f"/sessions/{child.pk}/").content.decode()
    assert f'href="/sessions/{session.pk}/"' in child_page


def test_an_unknown_import_format_is_refused_naming_the_field(make_agent: Any) -> None:
    """ninja checks `format` against the known ones before the route runs (422 naming it)."""
    agent = make_agent("imports-format")
    response = agent.client.post(
        "/api/v1/imports?format=bogus",
        fx.codex_rollout(),
        content_type="application/x-ndjson",
        headers=agent.headers(),
    )
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "format"
    assert not AgentSession.objects.filter(profile__name="imports-format").exists()


def test_the_same_transcript_from_another_path_is_a_clean_duplicate(profile, tmp_path):
    for name, text in (
        (f"{fx.SESSION}.jsonl", fx.claude_code_session(truncated=False)),
        (f"rollout-2026-11-30T10-00-00-{fx.CODEX_SESSION}.jsonl", fx.codex_rollout()),
    ):
        first = run_import(profile, write(tmp_path, f"a/{name}", text))
        assert first.status == "imported" and first.calls > 0
        before = snapshot(profile)
        again = run_import(profile, write(tmp_path, f"copy/{name}", text))
        assert again.status == "imported", again.as_dict()
        # the file's own unreadable lines again, and no conflict
        assert again.skipped == first.skipped
        assert again.calls == 0 and again.messages == 0
        assert again.duplicates == first.calls + first.duplicates
        assert snapshot(profile) == before


def test_a_different_transcript_of_the_same_session_from_another_path_is_a_conflict(
    profile, tmp_path
):
    run_import(profile, write(tmp_path, f"a/{fx.SESSION}.jsonl", fx.claude_code_session()))
    before = snapshot(profile)
    changed = fx.claude_code_session().replace("Reading the log.", "Reading the logs")
    report = run_import(profile, write(tmp_path, f"b/{fx.SESSION}.jsonl", changed))
    assert report.status == "failed"
    assert "already stored with different content" in report.detail
    assert snapshot(profile) == before
