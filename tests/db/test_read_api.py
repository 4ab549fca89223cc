"""The API of what the console knows: the sessions list (the console's filters and sorts,
keyset-paged), a session with a bounded series, its turns paged, its compaction history and
the overview's figures; money exact everywhere."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from compaction.models import CompactionRun
from console.selectors.policies import load_policies
from console.selectors.session_list import SORTS, SessionFilters, filtered_sessions
from telemetry.events import record_context_event
from telemetry.models import AgentSession
from tests.db.test_console_views import report

pytestmark = pytest.mark.django_db
SONNET = "claude-sonnet-4-5-20250929"
NINE = re.compile(r"^-?\d+\.\d{9}$")


def call(session_id: str, turn: int, *, tokens: int = 10_000, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn": turn,
        "model": SONNET,
        "usage": {
            "input_tokens": 333,
            "cache_read_input_tokens": tokens,
            "cache_creation_input_tokens": 77,
            "output_tokens": 111,
        },
        "window_tokens": 116_000,
        **extra,
    }


def fleet(agent: Any) -> None:
    """Sessions that differ in every sorted column, with nulls and ties among them."""
    report(agent.key, [call(f"s-{n}", 0, tokens=10_000 * (n % 4)) for n in range(7)])
    report(agent.key, [call("s-1", t, tokens=20_000 + t) for t in range(1, 4)])
    report(agent.key, [call("tie-a", 0), call("tie-b", 0)])
    # an unpriced model: cost null; no cache fields: hit ratio null
    unpriced = {
        "session_id": "unpriced",
        "turn": 0,
        "model": "acme-unknown-1",
        "provider": "anthropic",
    }
    report(agent.key, [{**unpriced, "usage": {"input_tokens": 50, "output_tokens": 5}}])
    report(agent.key, [call("other-model", 0, model="claude-haiku-4-5-20251001")])


def walk(agent: Any, query: str, limit: int) -> list[str]:
    """Every session id of the list, page by page."""
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        url = f"/api/v1/sessions?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        answer = agent.get(url)
        assert answer.status_code == 200, answer.content
        body = answer.json()
        assert len(body["sessions"]) <= limit
        seen += [s["session_id"] for s in body["sessions"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen
    raise AssertionError("the list never ended")


def console_order(agent: Any, sort: str, **filters: Any) -> list[str]:
    profiles = [agent.key.profile]
    found = filtered_sessions(SessionFilters(sort=sort, **filters), profiles, load_policies())
    return [s.external_id for s in found.filter(profile=agent.key.profile)]


@pytest.mark.parametrize("sort", [*SORTS, *(f"-{key}" for key in SORTS)])
def test_paging_through_any_sort_gives_the_consoles_order_exactly_once(agent, sort):
    fleet(agent)
    expected = console_order(agent, sort)
    assert len(expected) == 11
    assert walk(agent, f"sort={sort}", limit=2) == expected
    assert walk(agent, f"sort={sort}", limit=100) == expected


def test_the_filters_are_the_consoles(agent):
    fleet(agent)
    assert (
        walk(agent, "q=TIE", 5)
        == console_order(agent, "-last_seen", q="TIE")
        == [
            "tie-b",
            "tie-a",
        ]
    )
    haiku = "claude-haiku-4-5-20251001"
    assert walk(agent, f"model={haiku}", 5) == ["other-model"]
    for band in ("ok", "prune", "compact", "over", "unknown"):
        assert walk(agent, f"band={band}&sort=-pressure", 2) == console_order(
            agent, "-pressure", band=band
        )
    AgentSession.objects.filter(external_id="s-3").update(
        last_seen_at=timezone.now() - timedelta(hours=2)
    )
    active = walk(agent, "active=true", 3)
    assert "s-3" not in active and len(active) == 10


def test_a_page_after_a_cursor_is_stable_when_sessions_arrive(agent):
    fleet(agent)
    first = agent.get("/api/v1/sessions?limit=4").json()
    before = console_order(agent, "-last_seen")
    # new sessions sort first (newest seen); s-1 gets a call and moves up as well
    report(agent.key, [call(f"new-{n}", 0) for n in range(3)])
    rest: list[str] = []
    cursor = first["next_cursor"]
    while cursor:
        body = agent.get(f"/api/v1/sessions?limit=4&cursor={cursor}").json()
        rest += [s["session_id"] for s in body["sessions"]]
        cursor = body["next_cursor"]
    shown = [s["session_id"] for s in first["sessions"]] + rest
    assert shown == before  # none repeated, none skipped, none of the new ones mixed in
    assert not any(name.startswith("new-") for name in rest)


def test_each_listed_session_has_the_figures_of_its_own_read(agent):
    fleet(agent)
    listed = {
        s["session_id"]: s for s in agent.get("/api/v1/sessions?limit=100").json()["sessions"]
    }
    one = agent.get("/api/v1/sessions/s-1").json()
    assert listed["s-1"] == {
        k: v for k, v in one.items() if k not in ("turns_series", "series_complete")
    }
    assert listed["unpriced"]["cost_usd"] is None


def test_the_list_shows_only_the_keys_profile_and_needs_a_key(agent, outsider, client):
    fleet(agent)
    report(outsider.key, [call("theirs", 0)])
    assert walk(outsider, "sort=session", 5) == ["theirs"]
    assert "theirs" not in walk(agent, "sort=session", 50)
    answer = client.get("/api/v1/sessions")
    assert answer.status_code == 401 and answer["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("sort=cheapest", "sort"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("band=hot", "band"),
        ("cursor=not-a-cursor", "cursor"),
        ("q=" + "x" * 201, "q"),
        ("model=a%00b", "model"),
    ],
)
def test_bad_list_input_is_a_422_naming_the_field(agent, query, field):
    answer = agent.get(f"/api/v1/sessions?{query}")
    assert answer.status_code == 422, answer.content
    assert answer.json()["field"] == field


def test_a_cursor_of_another_sort_or_filters_is_refused_on_cursor(agent):
    fleet(agent)
    cursor = agent.get("/api/v1/sessions?limit=2&sort=cost").json()["next_cursor"]
    assert agent.get(f"/api/v1/sessions?limit=2&sort=cost&cursor={cursor}").status_code == 200
    for other in ("sort=-cost", "sort=cost&q=s"):
        answer = agent.get(f"/api/v1/sessions?limit=2&{other}&cursor={cursor}")
        assert answer.status_code == 422
        assert answer.json()["field"] == "cursor"
        assert "another sort or other filters" in answer.json()["detail"]
    forged = base64.urlsafe_b64encode(b'["x",[["i","1"]]]').decode()
    assert agent.get(f"/api/v1/sessions?cursor={forged}").json()["field"] == "cursor"


# --- one session -----------------------------------------------------------------------------


def test_a_session_read_is_bounded_and_says_whether_its_series_is_complete(agent):
    report(agent.key, [call("long", t, tokens=1_000 * t) for t in range(40)])
    report(agent.key, [call("long", 17, tokens=90_000, call=1)])  # the peak
    whole = agent.get("/api/v1/sessions/long").json()
    assert whole["series_complete"] is True and len(whole["turns_series"]) == 40

    figures = agent.get("/api/v1/sessions/long?series_limit=0").json()
    assert figures["turns_series"] == [] and figures["series_complete"] is False
    assert {k: v for k, v in figures.items() if k != "turns_series"} == {
        k: (False if k == "series_complete" else v) for k, v in whole.items() if k != "turns_series"
    }

    small = agent.get("/api/v1/sessions/long?series_limit=8").json()
    assert small["series_complete"] is False
    turns = [t["turn"] for t in small["turns_series"]]
    assert len(turns) <= 8 and turns == sorted(turns)
    assert {0, 17, 39} <= set(turns)  # first, peak, last: as the chart keeps them
    by_turn = {t["turn"]: t for t in whole["turns_series"]}
    assert all(t == by_turn[t["turn"]] for t in small["turns_series"])

    report(agent.key, [call("short", 0)])
    assert agent.get("/api/v1/sessions/short?series_limit=8").json()["series_complete"] is True


def test_the_downsampled_series_keeps_the_turns_around_a_compaction(agent):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    report(
        agent.key,
        [call("drop", t, at=(start + timedelta(minutes=t)).isoformat()) for t in range(60)],
    )
    session = AgentSession.objects.get(external_id="drop")
    CompactionRun.objects.create(
        session=session,
        mode="manual",
        status="applied",
        finished_at=start + timedelta(seconds=30 * 60 + 30),
        turn_received=30,  # applied after the server had received turn 30: it took effect at 31
    )
    turns = [
        t["turn"] for t in agent.get("/api/v1/sessions/drop?series_limit=10").json()["turns_series"]
    ]
    assert {30, 31} <= set(turns) and len(turns) <= 10


@pytest.mark.parametrize("value", ["-1", "2001", "many"])
def test_a_bad_series_limit_is_a_422_naming_it(agent, value):
    report(agent.key, [call("s", 0)])
    answer = agent.get(f"/api/v1/sessions/s?series_limit={value}")
    assert answer.status_code == 422 and answer.json()["field"] == "series_limit"


def test_turns_page_in_order_and_sum_to_the_sessions_cost_exactly(agent, outsider):
    report(agent.key, [call("paged", t, tokens=1_234 * t + 7) for t in range(7)])
    seen: list[dict[str, Any]] = []
    after = -1
    while after is not None:
        body = agent.get(f"/api/v1/sessions/paged/turns?after_turn={after}&limit=3").json()
        assert body["session_id"] == "paged" and len(body["turns"]) <= 3
        seen += body["turns"]
        after = body["next_after_turn"]
    assert [t["turn"] for t in seen] == list(range(7))
    session = agent.get("/api/v1/sessions/paged").json()
    assert all(NINE.match(t["cost_usd"]) for t in seen) and NINE.match(session["cost_usd"])
    # money as stored: the turns' costs add up to the session's to the last digit
    assert sum(Decimal(t["cost_usd"]) for t in seen) == Decimal(session["cost_usd"])
    assert outsider.get("/api/v1/sessions/paged/turns").status_code == 404
    bad = agent.get("/api/v1/sessions/paged/turns?limit=1001")
    assert bad.status_code == 422 and bad.json()["field"] == "limit"


# --- compaction history ------------------------------------------------------------------------


def test_the_compaction_history_is_one_ordered_list_with_origins(agent, outsider):
    report(agent.key, [call("hist", 0)])
    session = AgentSession.objects.get(external_id="hist")
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    runs = []
    for minutes, mode, status in ((10, "manual", "applied"), (30, "auto", "refused")):
        run = CompactionRun.objects.create(
            session=session, mode=mode, status=status, tokens_before=9_000, tokens_after=3_000
        )
        CompactionRun.objects.filter(pk=run.pk).update(started_at=at + timedelta(minutes=minutes))
        runs.append(run)
    for minutes, origin, key in ((0, "agent", "a"), (10, "provider", "b"), (40, "agent", "c")):
        record_context_event(
            session,
            kind="compaction" if origin == "agent" else "context_edit",
            origin=origin,
            source="claude-code" if origin == "agent" else "telemetry",
            source_key=key,
            at=at + timedelta(minutes=minutes),
            tokens_before=50_000,
            tokens_after=20_000,
        )
    body = agent.get("/api/v1/sessions/hist/compactions").json()
    entries = body["compactions"]
    assert [(e["origin"], e["mode"], e["kind"]) for e in entries] == [
        ("agent", None, "compaction"),
        ("ours", "manual", "compaction"),  # ours before theirs at the same instant
        ("provider", None, "context_edit"),
        ("ours", "auto", "compaction"),
        ("agent", None, "compaction"),
    ]
    assert body["next_cursor"] is None
    assert entries[1]["status"] == "applied" and entries[1]["tokens_freed"] == 6_000
    assert entries[0]["tokens_freed"] == 30_000 and entries[0]["status"] == "recorded"

    paged: list[str] = []
    cursor = ""
    while cursor is not None:
        page = agent.get(
            f"/api/v1/sessions/hist/compactions?limit=2&cursor={cursor}"
            if cursor
            else "/api/v1/sessions/hist/compactions?limit=2"
        ).json()
        paged += [e["id"] for e in page["compactions"]]
        cursor = page["next_cursor"]
    assert paged == [e["id"] for e in entries]
    assert outsider.get("/api/v1/sessions/hist/compactions").status_code == 404
    bad = agent.get("/api/v1/sessions/hist/compactions?cursor=%%%")
    assert bad.status_code == 422 and bad.json()["field"] == "cursor"


# --- overview --------------------------------------------------------------------------------


def test_the_overview_gives_the_consoles_figures_for_the_keys_profile(agent, outsider):
    now = timezone.now()
    report(
        agent.key,
        [call("o-1", t, at=(now - timedelta(minutes=5 * t)).isoformat()) for t in range(4)],
    )
    report(outsider.key, [call("o-theirs", 0)])
    body = agent.get("/api/v1/overview?range=24h").json()
    assert body["profile"] == "default" and body["range"] == "24h" and body["bucket"] == "hour"
    assert body["calls"] == 4
    assert len(body["buckets"]) == 25
    assert NINE.match(body["cost_usd"]) and Decimal(body["cost_usd"]) > 0
    assert sum(Decimal(b["cost_usd"]) for b in body["buckets"]) == Decimal(body["cost_usd"])
    session = agent.get("/api/v1/sessions/o-1").json()
    assert Decimal(body["cost_usd"]) == Decimal(session["cost_usd"])
    assert sum(body["sessions_by_band"].values()) == 1
    assert [s["session_id"] for s in body["top_cost"]] == ["o-1"]
    assert set(body["compactions_by_origin"]) == {"manual", "auto", "overflow", "agent", "provider"}
    assert agent.get("/api/v1/overview?range=30d&profile=default").json()["bucket"] == "day"


@pytest.mark.parametrize(
    ("query", "status", "field"),
    [
        ("range=2d", 422, "range"),
        ("profile=outsiders", 404, "profile"),
        ("profile=nope", 404, "profile"),
    ],
)
def test_bad_overview_input_names_the_field(agent, query, status, field):
    answer = agent.get(f"/api/v1/overview?{query}")
    assert answer.status_code == status and answer.json()["field"] == field


def test_a_page_of_the_list_costs_the_same_queries_for_few_or_many_sessions(
    agent, held_remembered_reads
):
    """The listing's own queries (sessions, their policies, their tags) do not grow with the
    page. The key's bookkeeping is left out of the count: the rate limit's lease is taken anew
    every `lease_size` requests and at each minute (an upsert, and a clean-up at its first), the
    key's last use is written once a minute; neither depends on the sessions listed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from telemetry.models import AgentKey, AgentSession, RateCount
    from telemetry.session_tags import add_tags_to_many

    rate_table, key_update = RateCount._meta.db_table, f'UPDATE "{AgentKey._meta.db_table}"'
    tag_table = "telemetry_sessiontag"
    report(agent.key, [call(f"few-{n}", 0) for n in range(3)])
    counts = []
    for more in (0, 60):
        report(agent.key, [call(f"many-{n}", 0) for n in range(more)])
        # every session holds two tags: the tags are read once for the page, however many
        add_tags_to_many(
            session_ids=AgentSession.objects.values_list("pk", flat=True), texts=["a", "b"]
        )
        cursor = agent.get("/api/v1/sessions?limit=2&sort=-pressure").json()["next_cursor"]
        with CaptureQueriesContext(connection) as queries:
            answer = agent.get(f"/api/v1/sessions?limit=50&sort=-pressure&cursor={cursor}")
        assert answer.status_code == 200 and answer.json()["sessions"]
        assert all(s["tags"] == ["a", "b"] for s in answer.json()["sessions"])
        listing = [
            sql
            for sql in (q["sql"] for q in queries.captured_queries)
            if rate_table not in sql and not sql.startswith(key_update)
        ]
        assert sum(tag_table in sql for sql in listing) == 1, listing
        counts.append(len(listing))
    assert counts[0] == counts[1], counts


@pytest.mark.parametrize(
    ("path", "query"),
    [("/api/v1/sessions", {"bnad": "over"}), ("/api/v1/overview", {"": "0", "range": "1h"})],
)
def test_a_parameter_the_route_does_not_take_is_a_422_naming_it(agent, path, query):
    """A misspelt filter must not answer as if there were none (every session listed)."""
    answer = agent.get(path, data=query)
    assert answer.status_code == 422
    assert answer.json()["field"] == (next(iter(query)) or "(blank)")
    assert "not a parameter of this route" in answer.json()["detail"]
