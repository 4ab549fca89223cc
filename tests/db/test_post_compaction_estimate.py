"""Post-compaction estimates on the real database: a session whose calls name the surface
they used is fitted (overhead + tokens per char) and its compaction estimated with the fit;
the history shows each estimate beside the next call's measured context."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from compaction.models import CompactionRun, LogMessage, Surface
from compaction.token_rates import appended_between
from context_core.estimates import KindChars, appended_after_reply
from telemetry.models import AgentSession
from tests.db.conftest import signed_in
from tests.support import tool_transcript

pytestmark = pytest.mark.django_db

OVERHEAD, RATIO = 18_000, 0.4  # the synthetic truth: system + tools, 2.5 chars per token


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def truth(chars: int) -> int:
    return OVERHEAD + round(RATIO * chars)


def grow(compactor, *, rounds: int, calls: int, appended: int | None = 0) -> AgentSession:
    """Append `rounds` tool rounds per step; after each step one call reports the truth for
    the surface it used (with `appended` as its `appended_chars`, None: not sent)."""
    seq, done = 1, 0
    for turn in range(calls):
        messages = tool_transcript(rounds, result_chars=12_000, first_seq=seq, first_round=done)
        body = {"format": "anthropic", "messages": messages}
        if turn == 0:
            body["system"] = "You are a build engineer."
        response = compactor.post("/api/v1/sessions/est/messages", body)
        assert response.status_code == 201, response.content
        seq += len(messages)
        done += rounds
        state = Surface.objects.get(session__external_id="est")
        report(compactor, turn, state.version, state.chars, appended)
    return AgentSession.objects.get(external_id="est")


def report(compactor, turn: int, version: int, chars: int, appended: int | None = 0) -> None:
    record: dict[str, Any] = {
        "session_id": "est",
        "turn": turn,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": truth(chars), "output_tokens": 0},
        "surface_version": version,
    }
    if appended is not None:
        record["appended_chars"] = appended
    assert compactor.post("/api/v1/telemetry", record).status_code == 201


def test_golden_a_fitted_session_is_estimated_within_15_percent_where_the_old_rule_is_2x_off(
    compactor,
):
    grow(compactor, rounds=4, calls=8)
    before = Surface.objects.get(session__external_id="est")
    plan = compactor.get("/api/v1/sessions/est/compact/plan").json()
    response = compactor.post("/api/v1/sessions/est/compact")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "applied" and body["estimate_method"] == "fit"
    # D6: the plan shows the estimate the run then records, not a second one
    assert (plan["tokens_after"], plan["estimate_method"]) == (body["estimate_tokens"], "fit")
    assert body["tokens_after"] == body["estimate_tokens"]
    assert plan["freed_tokens"] == plan["tokens_before"] - plan["tokens_after"]
    after = Surface.objects.get(session__external_id="est")
    real = truth(after.chars)
    estimate = AgentSession.objects.get(external_id="est").surface_estimate_tokens
    assert estimate == body["estimate_tokens"]
    assert abs(estimate - real) / real <= 0.15, (estimate, real)
    # Today's rule: the measured request − freed chars // 4.
    old_rule = truth(before.chars) - (before.chars - after.chars) // 4
    assert old_rule / real >= 2, (old_rule, real, before.chars, after.chars)

    # The history shows the estimate beside the next call's measured context, and the error.
    report(compactor, 8, after.version, after.chars)
    client = signed_in("viewer", "viewer-e")
    session = AgentSession.objects.get(external_id="est")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert 'data-estimate-method="fit"' in page
    assert f"{real:,} measured" in page
    run = CompactionRun.objects.get(status="applied")
    assert run.estimate_tokens is not None
    error = (run.estimate_tokens - real) / real
    assert f"{error * 100:.1f} %" in page


def test_with_too_few_calls_the_estimate_falls_back_to_the_rule(compactor):
    grow(compactor, rounds=6, calls=2)
    body = compactor.post("/api/v1/sessions/est/compact").json()
    assert body["status"] == "applied"
    assert body["estimate_method"] == "rule"
    assert body["estimate_tokens"] == body["tokens_after"]


def test_the_projection_after_a_large_tool_result_uses_the_sessions_learned_rate(compactor):
    grow(compactor, rounds=1, calls=6, appended=None)  # the log says what was appended
    state = Surface.objects.get(session__external_id="est")
    # the agent's next round: its reply (to the last call) and a large tool result
    messages = tool_transcript(1, result_chars=30_000, first_seq=state.log_messages, first_round=6)
    body = {"format": "anthropic", "messages": messages}
    assert compactor.post("/api/v1/sessions/est/messages", body).status_code == 201
    after = Surface.objects.get(session__external_id="est")
    real = truth(after.chars)
    projected = AgentSession.objects.get(external_id="est").projected_tokens
    assert projected is not None
    assert abs(projected - real) / real < 0.01, (projected, real)
    # chars // 4 of what was appended would have been low by more than 1 %
    result = LogMessage.objects.get(session__external_id="est", seq=messages[-1]["seq"])
    assert result.tool_chars == result.chars  # recorded as a tool result
    quarter = truth(state.chars) + result.chars // 4
    assert (real - quarter) / real > 0.01, (quarter, real)


def test_the_databases_sums_of_what_a_request_adds_are_the_pure_rule(compactor):
    session = grow(compactor, rounds=2, calls=3, appended=None)
    LogMessage.objects.filter(session=session, seq=4).update(tool_chars=None)  # unrecorded
    rows = list(
        LogMessage.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "chars", "tool_chars")
    )
    last = rows[-1][0] + 1
    spans = [(a, b) for a in range(last) for b in range(a + 1, last + 1)]
    expected = [
        appended_after_reply((role, chars, tool) for seq, role, chars, tool in rows if a <= seq < b)
        for a, b in spans
    ]
    assert appended_between(session.pk, spans) == expected
    assert any(e.tool for e in expected) and any(e.prose for e in expected)
    assert KindChars() in expected  # spans without a reply add nothing
