"""The demo scenario (`demo.scenario`): deterministic, valid for the API, and interesting.

Pure: runs with `-p no:django`. The usage objects are checked with the one normaliser the ingest
API uses, and the transcripts with the compaction core's parsers and planners (the scenario
itself imports neither), so a shape the API would refuse, or a demo the worker would find
nothing to do in, fails here first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from context_core import (
    BoundSpec,
    ExtractiveSummarizer,
    Message,
    ReliefPlan,
    ReliefPolicy,
    Surface,
    TranscriptError,
    derive_surface,
    parse_anthropic,
    parse_openai,
    plan_relief,
)
from demo.scenario import (
    BIG_RESULT_CHARS,
    DEFAULT_LIMITS,
    LONG_GAP,
    MAX_ROUND_GAP,
    ROSTER,
    ROUNDS,
    SHORT_GAP,
    SYSTEM_REMINDER,
    Append,
    CallRecord,
    Limits,
    Scenario,
    SessionScript,
    build_scenario,
    expected_signals,
    format_at,
    message_chars,
    plan_submissions,
)
from telemetry.policy_rules import default_policy_for
from telemetry.pressure import estimate_tokens, projected_next_request
from telemetry.pricing import SEED_CATALOGUE, find_price
from telemetry.usage import normalize_usage

NOW = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return build_scenario(seed=7, now=NOW)


def script(scenario: Scenario, slug: str) -> SessionScript:
    (found,) = [s for s in scenario.sessions if s.spec.slug == slug]
    return found


def hit_ratio(records: tuple[CallRecord, ...]) -> float:
    return sum(r.cache_read for r in records) / sum(r.context_tokens for r in records)


# --- determinism -------------------------------------------------------------------------------


def _fingerprint(s: Scenario) -> list[Any]:
    return [
        (
            event.session_id,
            event.user,
            [(r.record.payload(), r.reply, r.appended) for r in event.rounds],
        )
        for event in s.turn_events()
    ] + [
        (
            script.session_id,
            [a.body() for a in script.appends()],
            script.overflow and [a.body() for a in script.overflow.appends()],
            script.overflow and script.overflow.retry(50_000).payload(),
        )
        for script in s.sessions
    ]


def test_same_seed_and_clock_give_the_same_scenario(scenario: Scenario) -> None:
    again = build_scenario(seed=7, now=NOW)

    assert _fingerprint(again) == _fingerprint(scenario)
    assert [s.body() for s in plan_submissions(again)] == [
        s.body() for s in plan_submissions(scenario)
    ]


def test_another_seed_gives_other_traffic_with_the_same_story(scenario: Scenario) -> None:
    other = build_scenario(seed=8, now=NOW)

    assert _fingerprint(other) != _fingerprint(scenario)
    assert [s.final_band for s in other.sessions] == [s.final_band for s in scenario.sessions]


def test_session_ids_differ_per_run_so_a_second_run_does_not_collide(scenario: Scenario) -> None:
    later = build_scenario(seed=7, now=NOW + timedelta(seconds=1))

    ids = {s.session_id for s in scenario.sessions}
    assert len(ids) == len(ROSTER)
    assert ids.isdisjoint(s.session_id for s in later.sessions)
    assert all(s.session_id.startswith(s.spec.slug + "-") for s in scenario.sessions)


def test_more_sessions_than_the_roster_repeat_it_with_unique_ids() -> None:
    big = build_scenario(seed=7, now=NOW, sessions=len(ROSTER) + 3)
    small = build_scenario(seed=7, now=NOW, sessions=2)

    assert len({s.session_id for s in big.sessions}) == len(ROSTER) + 3
    assert [s.spec.slug for s in small.sessions] == [ROSTER[0].slug, ROSTER[1].slug]
    with pytest.raises(ValueError, match="at least 1"):
        build_scenario(seed=7, now=NOW, sessions=0)
    with pytest.raises(ValueError, match="timezone-aware"):
        build_scenario(seed=7, now=NOW.replace(tzinfo=None))


def test_the_scenario_module_imports_neither_django_nor_compaction() -> None:
    code = (
        "import sys, demo.scenario; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'compaction')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- the fleet -----------------------------------------------------------------------------------


def test_the_fleet_covers_the_providers_shapes_and_windows(scenario: Scenario) -> None:
    models = {s.spec.model for s in scenario.sessions}
    shapes = Counter(s.spec.shape for s in scenario.sessions)

    assert 8 <= len(scenario.sessions) <= 12
    assert {
        "claude-sonnet-4-5-20250929",
        "claude-opus-4-5-20251101",
        "claude-haiku-4-5-20251001",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "gpt-5",
        "gpt-4.1",
    } <= models
    assert set(shapes) == {
        "anthropic",
        "bedrock",
        "openai_chat",
        "openai_responses",
        "otel",
        "openai_compatible",
    }
    assert {s.spec.profile for s in scenario.sessions} == {"default", "fleet", "desktop"}
    one_million = [s for s in scenario.sessions if s.spec.window_tokens == 1_000_000]
    assert len(one_million) == 1 and one_million[0].spec.report_window
    assert all(r.window_tokens == 1_000_000 for r in one_million[0].records)


def test_only_the_self_hosted_model_is_unpriced_and_windows_match_the_catalogue(
    scenario: Scenario,
) -> None:
    for s in scenario.sessions:
        price = find_price(s.spec.model, SEED_CATALOGUE)
        assert (price is not None) == s.spec.priced, s.spec.model
        if price is not None and not s.spec.report_window:
            # The pressure the scenario plans for is the pressure the console will compute.
            assert price.window_tokens == s.spec.window_tokens, s.spec.model
    assert [s.spec.model for s in scenario.sessions if not s.spec.priced] == ["acme-coder-70b"]


# --- usage objects -------------------------------------------------------------------------------


def test_every_usage_object_normalises_to_the_planned_buckets(scenario: Scenario) -> None:
    expected_format = {
        "anthropic": "anthropic",
        "bedrock": "anthropic",
        "openai_chat": "openai_chat",
        "openai_responses": "openai_responses",
        "otel": "otel",
        "openai_compatible": "openai_chat",
    }
    for s in scenario.sessions:
        for r in s.records:
            usage = normalize_usage(
                r.usage, provider=r.provider, model=r.model, cache_ttl=s.limits.cache_ttl
            )
            assert usage.provider == expected_format[s.spec.shape]
            assert usage.context_tokens == r.context_tokens
            assert usage.cache_read == r.cache_read
            assert usage.cache_write == r.cache_write
            assert usage.output == r.output
            assert usage.reasoning_output == (
                r.reasoning if s.spec.reasoning else usage.reasoning_output
            )
            assert usage.reported_cache == (s.spec.shape != "openai_compatible")
            assert not usage.flags
            ttl_bucket = (
                usage.cache_write_1h if s.limits.cache_ttl == "1h" else usage.cache_write_5m
            )
            assert ttl_bucket == usage.cache_write


def test_fleet_and_desktop_anthropic_writes_are_reported_in_the_one_hour_tier(
    scenario: Scenario,
) -> None:
    for s in scenario.sessions:
        if s.spec.shape != "anthropic":
            continue
        split = [r.usage["cache_creation"] for r in s.records]
        tier = "1h" if s.spec.profile in ("fleet", "desktop") else "5m"
        other = "5m" if tier == "1h" else "1h"
        assert sum(c[f"ephemeral_{tier}_input_tokens"] for c in split) > 0
        assert all(c[f"ephemeral_{other}_input_tokens"] == 0 for c in split)
    bedrock = script(scenario, "dependency-audit")
    assert all("cache_creation" not in r.usage for r in bedrock.records)


def test_openai_caches_in_128_token_steps_and_gpt5_reports_reasoning(scenario: Scenario) -> None:
    for slug in ("api-docs-writer", "support-triage", "ci-log-summarizer"):
        records = script(scenario, slug).records
        assert all(r.cache_read % 128 == 0 for r in records)
        assert records[0].cache_read == 0 and any(r.cache_read > 0 for r in records)
    gpt5 = script(scenario, "api-docs-writer").records
    assert all(r.usage["completion_tokens_details"]["reasoning_tokens"] > 0 for r in gpt5)
    otel = script(scenario, "ci-log-summarizer").records[0].usage
    assert set(otel) <= {
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.reasoning.output_tokens",
    }


def test_records_are_valid_api_payloads(scenario: Scenario) -> None:
    allowed = {
        "session_id",
        "turn",
        "call",
        "model",
        "usage",
        "provider",
        "request_id",
        "request_chars",
        "appended_chars",
        "window_tokens",
        "at",
        "prefix",
    }
    request_ids = [r.request_id for r in scenario.records if r.request_id is not None]
    assert len(request_ids) == len(set(request_ids))
    for r in scenario.records:
        body = r.payload()
        assert set(body) <= allowed
        assert body["appended_chars"] >= 0 and isinstance(body["appended_chars"], int)
        assert body["at"].endswith("Z")
        assert datetime.fromisoformat(body["at"]) == r.at.replace(
            microsecond=r.at.microsecond // 1000 * 1000
        )
        assert len(body["session_id"]) <= 200


def test_format_at_is_rfc3339_utc_with_z() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert format_at(moment) == "2026-01-02T03:04:05.678Z"
    assert format_at(moment.astimezone(UTC)) == format_at(moment)


# --- context growth and pressure -----------------------------------------------------------------


def test_projection_matches_the_next_request_and_appended_chars_the_messages(
    scenario: Scenario,
) -> None:
    for s in scenario.sessions:
        for event in s.turns:
            for k, rnd in enumerate(event.rounds):
                r = rnd.record
                assert r.appended_chars == sum(message_chars(m) for m in rnd.appended)
                assert r.projected_next == projected_next_request(
                    context_tokens=r.context_tokens,
                    output=r.output,
                    reasoning_output=r.reasoning,
                    appended_tokens=estimate_tokens(r.appended_chars),  # the world's tokenizer
                )
                if k + 1 < len(event.rounds):
                    assert event.rounds[k + 1].record.context_tokens == r.projected_next
                else:
                    assert r.appended_chars == 0  # the final reply ends the turn
        contexts = [r.context_tokens for r in s.records]
        assert contexts == sorted(contexts)  # no compaction in this step: context only grows


def test_sessions_cross_the_prune_and_summarize_thresholds(scenario: Scenario) -> None:
    bands = {s.spec.slug: s.final_band for s in scenario.sessions}

    assert Counter(bands.values()) == {"ok": 6, "prune": 3, "compact": 2}
    assert bands["billing-refactor"] == "compact"
    assert bands["dependency-audit"] == "compact"
    assert bands["incident-triage"] == bands["flaky-test-bisect"] == "prune"
    assert bands["local-coder"] == "prune"
    for s in scenario.sessions:
        usable = s.spec.window_tokens - 16_000
        # Every band is reached with margin, not by a rounding accident.
        assert s.final_pressure == pytest.approx(s.last.projected_next / usable)
        assert abs(s.final_pressure - 0.60) > 0.03 and abs(s.final_pressure - 0.80) > 0.03
        assert s.final_pressure < 0.95
    # The 1M window: far past a 200k window's wall, well inside its own.
    migration = script(scenario, "monorepo-migration")
    assert migration.last.projected_next > 200_000 and migration.final_band == "ok"


@pytest.mark.parametrize("seed", range(1, 21))
def test_every_seed_lands_in_the_same_bands_with_valid_usage(seed: int) -> None:
    s = build_scenario(seed=seed, now=NOW)

    assert Counter(x.final_band for x in s.sessions) == {"ok": 6, "prune": 3, "compact": 2}
    for x in s.sessions:
        assert all(abs(x.final_pressure - t) > 0.03 for t in (0.60, 0.80))
        for r in x.records:
            usage = normalize_usage(r.usage, provider=r.provider, cache_ttl=x.limits.cache_ttl)
            assert usage.context_tokens == r.context_tokens


@pytest.mark.parametrize("seed", range(1, 7))
def test_every_seed_gives_the_worker_and_the_demo_steps_work(seed: int) -> None:
    s = build_scenario(seed=seed, now=NOW)

    for x in s.sessions:
        if x.final_band == "ok" and x.spec.demo is None:
            continue
        log, _ = replay_log(x)  # a valid log for the core
        surface = derive_surface(log, [])
        normal = plan(x, surface, "normal")
        assert normal.action == ("nothing" if x.final_band == "ok" else "prune"), x.spec.slug
        if x.spec.demo is not None:
            assert plan(x, surface, "forced").action == "prune+summarize", x.spec.slug


def test_targets_follow_the_policy_the_server_reports() -> None:
    strict = {p: Limits(prune_threshold=0.4, summarize_threshold=0.5) for p in DEFAULT_LIMITS}
    s = build_scenario(seed=7, now=NOW, limits=strict)

    billing = script(s, "billing-refactor")
    assert 0.5 <= billing.final_pressure < 1.0
    assert billing.final_band == "compact"


def test_limits_parse_the_policy_endpoint_body() -> None:
    body = {
        "cache_ttl": "1h",
        "prune_threshold": 0.55,
        "summarize_threshold": 1,
        "reserved_output_tokens": 8000,
        "round_soft_limit": 30,
        "round_hard_cap": 60,
        "nudge_text": "…",
    }
    limits = Limits.from_policy(body)
    assert limits == Limits("1h", 0.55, 1.0, 8000, 30, 60)
    with pytest.raises(ValueError, match="cache_ttl"):
        Limits.from_policy({**body, "cache_ttl": "24h"})
    with pytest.raises(ValueError, match="round_hard_cap"):
        Limits.from_policy({**body, "round_hard_cap": 60.0})
    with pytest.raises(ValueError, match="prune_threshold"):
        Limits.from_policy({**body, "prune_threshold": True})


# --- rounds --------------------------------------------------------------------------------------


def test_rounds_per_turn_and_the_nudge_and_stop_turns(scenario: Scenario) -> None:
    limits = DEFAULT_LIMITS["default"]
    long_turns = {}
    for s in scenario.sessions:
        for event in s.turns:
            n = len(event.rounds)
            assert [r.record.call for r in event.rounds] == list(range(n))
            if n > ROUNDS[1]:
                long_turns[s.spec.slug] = n
            else:
                assert ROUNDS[0] <= n <= ROUNDS[1]
    assert long_turns == {
        "flaky-test-bisect": limits.round_hard_cap,
        "api-docs-writer": limits.round_soft_limit + 6,
    }
    assert script(scenario, "flaky-test-bisect").signal == "stop"
    assert script(scenario, "api-docs-writer").signal == "nudge"


def test_long_turns_are_reported_call_by_call_with_the_signal_at_the_right_round(
    scenario: Scenario,
) -> None:
    subs = plan_submissions(scenario)
    signals = expected_signals(subs)
    seen: dict[str, list[tuple[int, str]]] = {}
    for sub, answer in zip(subs, signals, strict=True):
        for record, signal in zip(sub.records, answer, strict=True):
            if record.turn == 3 and record.session_id.startswith(("flaky-test", "api-docs")):
                assert not sub.batch
                seen.setdefault(record.session_id.split("-")[0], []).append((record.call, signal))
    flaky = dict(seen["flaky"])
    assert [flaky[c] for c in (0, 38, 39, 98, 99)] == ["none", "none", "nudge", "nudge", "stop"]
    docs = dict(seen["api"])
    assert [docs[c] for c in (38, 39, 45)] == ["none", "nudge", "nudge"]


# --- cache behaviour -----------------------------------------------------------------------------


def test_anthropic_sessions_write_the_prefix_then_read_it(scenario: Scenario) -> None:
    for s in scenario.sessions:
        if s.spec.wire != "anthropic":
            continue
        first = s.records[0]
        assert first.cache_read == 0 and first.cache_write > 0.9 * first.context_tokens
        assert 0.85 <= hit_ratio(s.records) <= 0.99, s.spec.slug
        breaks = {(t.turn, 0) for t in s.turns if t.system_changed or t.cache_expired}
        for previous, r in zip(s.records, s.records[1:], strict=False):
            if (r.turn, r.call) in breaks:
                continue
            # Warm: it reads exactly what the previous call cached, and writes only what is new.
            uncached = previous.usage["input_tokens"]
            assert r.cache_read == previous.context_tokens - uncached
            assert r.cache_write == r.context_tokens - r.cache_read - r.usage["input_tokens"]
            assert 1 <= r.usage["input_tokens"] <= 12


def test_a_system_prompt_change_breaks_the_cache_for_one_turn(scenario: Scenario) -> None:
    billing = script(scenario, "billing-refactor")
    (changed,) = [t for t in billing.turns if t.system_changed]
    before = billing.turns[changed.turn - 2]
    first = changed.rounds[0].record

    assert changed.turn == 6 and changed.system != before.system
    assert first.cache_read == 0
    assert first.cache_write > 10 * max(r.record.cache_write for r in before.rounds)
    assert hit_ratio(changed.records) < 0.6 < 0.9 < hit_ratio(before.records)
    assert hit_ratio(billing.turns[changed.turn].records) > 0.9  # and it recovers


def test_the_5m_tier_expires_over_long_gaps_and_the_1h_tier_survives_them(
    scenario: Scenario,
) -> None:
    for s in scenario.sessions:
        if s.spec.wire != "anthropic":
            continue
        for event in s.turns:
            long_gap = event.gap_before is not None and event.gap_before > timedelta(minutes=5)
            expected = long_gap and s.limits.cache_ttl == "5m" and not event.system_changed
            assert event.cache_expired == expected, (s.spec.slug, event.turn)
            if event.cache_expired:
                assert event.rounds[0].record.cache_read == 0
    billing = script(scenario, "billing-refactor")
    assert [t.turn for t in billing.turns if t.cache_expired] == [4]
    one_hour = [
        s for s in scenario.sessions if s.limits.cache_ttl == "1h" and s.spec.wire == "anthropic"
    ]
    assert one_hour and all(
        any(t.gap_before and t.gap_before > timedelta(minutes=10) for t in s.turns)
        and not any(t.cache_expired for t in s.turns)
        for s in one_hour
    )


# --- time ----------------------------------------------------------------------------------------


def test_gaps_are_seconds_within_a_turn_and_minutes_between_turns(scenario: Scenario) -> None:
    short = long = 0
    for s in scenario.sessions:
        records = s.records
        for a, b in zip(records, records[1:], strict=False):
            gap = (b.at - a.at).total_seconds()
            assert gap > 0
            if a.turn == b.turn:
                assert gap < MAX_ROUND_GAP
            elif SHORT_GAP[0] <= gap <= SHORT_GAP[1]:
                short += 1
            else:
                assert LONG_GAP[0] <= gap <= LONG_GAP[1]
                long += 1
    assert short >= 10 and long >= 10


def test_timestamps_spread_over_the_last_few_hours(scenario: Scenario) -> None:
    times = [r.at for r in scenario.records]
    assert max(times) < NOW
    assert NOW - min(times) < timedelta(hours=6)
    assert NOW - min(times) > timedelta(hours=2)
    ends = sorted(s.last.at for s in scenario.sessions)
    assert ends[-1] - ends[0] > timedelta(minutes=30)


# --- transcripts (appended by a later step) ------------------------------------------------------


def test_turn_messages_pair_every_tool_call_with_its_result(scenario: Scenario) -> None:
    for s in scenario.sessions:
        for event in s.turns:
            assert event.user["role"] == "user"
            for rnd in event.rounds:
                if s.spec.wire == "anthropic":
                    calls = [b["id"] for b in rnd.reply["content"] if b["type"] == "tool_use"]
                    results = [b["tool_use_id"] for m in rnd.appended for b in m["content"]]
                else:
                    calls = [c["id"] for c in rnd.reply.get("tool_calls", ())]
                    results = [m["tool_call_id"] for m in rnd.appended]
                assert calls == results
                assert bool(calls) == (rnd is not event.rounds[-1])
            assert list(event.messages())[0] is event.user


# --- submissions ---------------------------------------------------------------------------------


def test_submissions_send_every_record_once_mostly_in_batches(scenario: Scenario) -> None:
    subs = plan_submissions(scenario)
    *first, replay = subs
    sent = [r for s in first for r in s.records]

    assert Counter((r.session_id, r.turn, r.call) for r in sent) == Counter(
        (r.session_id, r.turn, r.call) for r in scenario.records
    )
    # With the transcript appended, each record carries the version its append answered.
    versions = {(r.session_id, r.turn, r.call): 40 + r.call for r in scenario.records}
    for sub in subs:
        body = sub.body(versions)
        for payload in body["records"] if sub.batch else [body]:
            key = (payload["session_id"], payload["turn"], payload["call"])
            assert payload["surface_version"] == versions[key]
        assert all("surface_version" not in p for p in _payloads(sub.body()))
    assert not any(s.replay for s in first) and replay.replay and replay.batch
    assert any(s.records == replay.records and s.batch for s in first)
    assert len({r.session_id for r in replay.records}) >= 2
    in_batches = sum(len(s.records) for s in first if s.batch)
    assert in_batches > len(sent) / 2
    assert sum(1 for s in first if not s.batch) > 0
    for sub in subs:
        assert len(sub.records) <= 1000
        assert {r.profile for r in sub.records} == {sub.profile}
        if not sub.batch:
            assert len(sub.records) == 1 and "records" not in sub.body()
    # Per session, the calls arrive in order.
    order: dict[str, list[tuple[int, int]]] = {}
    for r in sent:
        order.setdefault(r.session_id, []).append((r.turn, r.call))
    assert all(v == sorted(v) for v in order.values())


def _payloads(body: dict[str, Any]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = body.get("records", [body])
    return records


# --- transcripts -------------------------------------------------------------------------------

CAP = default_policy_for("default").max_result_chars


def _parse_append(append: Append, log: list[Message]) -> list[Message]:
    """What the server's append does with the body: the core parses it as the log's sequel."""
    body = json.loads(json.dumps(append.body()))  # through JSON, as it travels
    seqs = [m.pop("seq") for m in body["messages"]]
    first = 0 if "system" in body else seqs[0]
    assert seqs == list(range(append.first_seq, append.first_seq + len(seqs)))
    if append.format == "anthropic":
        return parse_anthropic(
            body["messages"],
            system=body.get("system"),
            first_seq=first,
            preceding=log,
            bound=BoundSpec(CAP),
        )
    assert "system" not in body
    return parse_openai(body["messages"], first_seq=first, preceding=log, bound=BoundSpec(CAP))


def replay_log(script: SessionScript) -> tuple[list[Message], dict[tuple[int, int], int]]:
    """The session's log after every scripted append, and each call's log length before it."""
    log: list[Message] = []
    before: dict[tuple[int, int], int] = {}
    for append in script.appends():
        assert append.first_seq == (1 if append.system is not None else len(log))
        log += _parse_append(append, log)
        if append.before is not None:
            before[append.before] = len(log)
    return log, before


def test_every_transcript_is_a_valid_log_for_the_core(scenario: Scenario) -> None:
    for s in scenario.sessions:
        log, before = replay_log(s)
        calls = [(r.turn, r.call) for r in s.records]
        # One append before every call, in call order; then the reply that ends the session.
        assert list(before) == calls
        assert [a.before for a in s.appends()] == [*calls, None]
        assert [m.seq for m in log] == list(range(len(log)))
        assert log[0].role == "system" and log[0].text == s.turns[0].system
        assert log[-1].role == "assistant" and not log[-1].call_ids
        expected = [m for event in s.turns for m in event.messages()]
        assert len(log) == 1 + len(expected)
        for message, parsed in zip(expected, log[1:], strict=True):
            assert message_chars(message) == parsed.chars


def test_appended_chars_are_the_core_chars_of_the_results_after_the_reply(
    scenario: Scenario,
) -> None:
    """The rule: a record's `appended_chars` is what the agent added to its log after the
    call's reply and before the next call, counted as the core counts (`Message.chars`); the
    reply itself is in the usage's output tokens. A turn's last call appends nothing."""
    for s in scenario.sessions:
        log, before = replay_log(s)
        keys = list(before)
        for event in s.turns:
            for k, rnd in enumerate(event.rounds):
                key = (event.turn, k)
                start = before[key]
                index = keys.index(key)
                stop = before[keys[index + 1]] if index + 1 < len(keys) else len(log)
                after_reply = log[start + 1 : stop]
                if k + 1 < len(event.rounds):
                    assert rnd.record.appended_chars == sum(m.chars for m in after_reply)
                    assert all(m.is_tool_result_carrier for m in after_reply)
                else:
                    assert rnd.record.appended_chars == 0
                    # Only the next turn's user message follows, reported by the next call.
                    assert [m.role for m in after_reply] in ([], ["user"])


def test_request_chars_are_the_log_before_the_call_plus_any_newer_system_prompt(
    scenario: Scenario,
) -> None:
    for s in scenario.sessions:
        if s.spec.shape not in ("anthropic", "openai_chat", "openai_responses"):
            continue
        log, before = replay_log(s)
        by_turn = {t.turn: t for t in s.turns}
        for r in s.records:
            newer_system = len(by_turn[r.turn].system) - len(s.turns[0].system)
            assert r.request_chars == sum(m.chars for m in log[: before[(r.turn, r.call)]]) + (
                newer_system
            )


def test_a_changed_system_prompt_reaches_the_log_as_a_reminder(scenario: Scenario) -> None:
    billing = script(scenario, "billing-refactor")
    (changed,) = [t for t in billing.turns if t.system_changed]
    assert changed.user["content"].startswith(SYSTEM_REMINDER)
    assert sum(SYSTEM_REMINDER in str(t.user["content"]) for t in billing.turns) == 1


def _results(s: SessionScript) -> list[str]:
    texts = []
    for event in s.turns:
        for rnd in event.rounds:
            for m in rnd.appended:
                if m["role"] == "tool":
                    texts.append(m["content"])
                else:
                    texts += [b["content"] for b in m["content"]]
    return texts


def test_tool_results_are_realistic_some_large_some_unicode_one_with_a_nul(
    scenario: Scenario,
) -> None:
    results = [(s, text) for s in scenario.sessions for text in _results(s)]
    big = [(s.spec.slug, len(t)) for s, t in results if len(t) >= BIG_RESULT_CHARS[0]]
    # Besides the planned whole-file reads, ordinary results grow with the session's budget.
    assert len(big) >= 15
    assert max(n for _, n in big) <= BIG_RESULT_CHARS[1]
    assert sum(n > CAP for _, n in big) >= 3  # bounded on the surface, kept whole in the log
    assert {slug for slug, _ in big} >= {
        "billing-refactor",
        "incident-triage",
        "flaky-test-bisect",
        "monorepo-migration",
        "dependency-audit",
        "local-coder",
    }
    assert sum(any(ord(c) > 127 for c in t) for _, t in results) > len(results) / 2
    assert any(any(ord(c) > 0xFFFF for c in t) for _, t in results)  # beyond the BMP: 🔥
    with_nul = [(s.spec.slug, t) for s, t in results if "\x00" in t]
    assert [slug for slug, _ in with_nul] == ["incident-triage"]
    assert "\\u0000" in json.dumps(with_nul[0][1])
    # A result starts with the tool and what it was asked, and reads like that tool's output.
    reads = [t for _, t in results if t.startswith("[read_file] ")]
    logs = [t for _, t in results if t.startswith("[query_logs] ")]
    assert reads and all("def " in t or "class " in t or len(t) < 400 for t in reads)
    assert logs and all("Z " in t or len(t) < 200 for t in logs)


def test_big_results_come_early_enough_to_be_pruned_later(scenario: Scenario) -> None:
    for s in scenario.sessions:
        log, _ = replay_log(s)
        rounds_after = 0
        early_big = 0
        for message in reversed(log):
            if message.role == "assistant":
                rounds_after += 1
            keep = default_policy_for(s.spec.profile).keep_rounds
            if message.longest_result >= BIG_RESULT_CHARS[0] and rounds_after > keep:
                early_big += 1
        assert early_big >= s.spec.big_results, s.spec.slug


# --- what compaction will find in them -----------------------------------------------------------


def relief_policy(s: SessionScript) -> ReliefPolicy:
    """The profile's default policy as the compaction service maps it (window from the spec)."""
    p = default_policy_for(s.spec.profile)
    return ReliefPolicy(
        prune_threshold=p.prune_threshold,
        summarize_threshold=p.summarize_threshold,
        keep_rounds=p.keep_rounds,
        keep_rounds_verbatim=p.keep_rounds_verbatim,
        stub_head_chars=p.stub_head_chars,
        stub_tail_chars=p.stub_tail_chars,
        max_result_chars=p.max_result_chars,
        prune_min_free_tokens=p.prune_min_free_tokens,
        prune_exclude_tools=frozenset(p.prune_exclude_tools),
        summary_max_tokens=p.summary_max_tokens,
        window_tokens=s.spec.window_tokens,
        reserved_output_tokens=p.reserved_output_tokens,
    )


def plan(s: SessionScript, surface: Surface, mode: str) -> ReliefPlan:
    return plan_relief(
        surface,
        policy=relief_policy(s),
        mode="forced" if mode == "forced" else "normal",
        summarizer=ExtractiveSummarizer(),
        context_tokens=s.last.projected_next if mode == "normal" else None,
    )


def test_the_demo_roles_are_one_session_each_in_the_band_their_step_needs(
    scenario: Scenario,
) -> None:
    roles = {s.spec.demo: s for s in scenario.sessions if s.spec.demo}
    assert sorted(roles) == ["archive_outage", "manual_compact", "overflow"]
    assert sum(1 for spec in ROSTER if spec.demo) == 3
    assert roles["overflow"].final_band == "compact"  # near the wall
    assert roles["archive_outage"].final_band in ("prune", "compact")  # automatic relief acts
    assert roles["manual_compact"].final_band == "ok"  # the worker never takes it
    assert all(s.overflow is None for s in scenario.sessions if s.spec.demo != "overflow")


def test_sessions_over_the_prune_threshold_give_automatic_relief_work(scenario: Scenario) -> None:
    for s in scenario.sessions:
        log, _ = replay_log(s)
        surface = derive_surface(log, [])
        normal = plan(s, surface, "normal")
        if s.final_band == "ok":
            assert normal.action == "nothing", s.spec.slug
            continue
        # The prune pass frees well over the policy's minimum and brings pressure under it.
        assert normal.action == "prune", (s.spec.slug, normal.reason)
        assert normal.freed_tokens > 10 * relief_policy(s).prune_min_free_tokens
        assert normal.pressure_after < relief_policy(s).prune_threshold
        forced = plan(s, surface, "forced")
        assert forced.action == "prune+summarize", (s.spec.slug, forced.reason)


def test_the_overflow_turn_goes_past_the_wall_and_the_retry_fits(scenario: Scenario) -> None:
    s = script(scenario, "billing-refactor")
    turn = s.overflow
    assert turn is not None and turn.turn == len(s.turns) + 1
    usable = s.usable_window
    assert s.last.projected_next < usable < turn.rejected_tokens < usable * 1.1
    assert f"{turn.rejected_tokens} + 16000 > 200000" in turn.detail
    pasted, reply = turn.appends()
    assert (pasted.first_seq, reply.first_seq) == (s.log_length, s.log_length + 1)
    assert (pasted.before, reply.before) == ((turn.turn, 0), None)
    log, _ = replay_log(s)
    log += _parse_append(pasted, log)
    overflowed = plan(s, derive_surface(log, []), "forced")
    assert overflowed.action == "prune+summarize"
    assert overflowed.pressure_after < 0.5
    log += _parse_append(reply, log)

    retry = turn.retry(overflowed.tokens_after)
    usage = normalize_usage(retry.usage, provider=retry.provider, cache_ttl=s.limits.cache_ttl)
    assert (
        usage.context_tokens
        == retry.context_tokens
        == overflowed.tokens_after + (turn.overhead_tokens)
    )
    assert usage.cache_read == retry.cache_read == turn.stable_tokens  # tools + system cached
    assert (retry.turn, retry.call, retry.appended_chars) == (turn.turn, 0, 0)
    assert s.last.at < retry.at < NOW
    assert retry.payload(99)["surface_version"] == 99
    assert retry.projected_next / usable < DEFAULT_LIMITS["default"].prune_threshold


def test_a_transcript_out_of_order_is_refused_by_the_core(scenario: Scenario) -> None:
    """The check above has teeth: an append that skips its predecessor does not parse."""
    s = script(scenario, "incident-triage")
    first, second = s.appends()[:2]
    log = _parse_append(first, [])
    results_only = replace(second, messages=second.messages[1:])
    with pytest.raises(TranscriptError, match="result"):
        _parse_append(results_only, log)  # results whose call was never appended
    assert _parse_append(second, log)
