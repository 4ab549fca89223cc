"""Any period on the pages with figures (issue 39, item 1): a custom range in the operator's
zone with day buckets at local midnight, the previous period beside, the drill-down from a bucket
to the sessions active in it, the overview's refresh sending only what changed, and the same
period through the read API and the exports; a bad value is refused naming its field."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal
from html import unescape
from typing import Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from console.overview import load_overview
from console.periods import parse_period
from console.selectors.policies import load_policies
from console.selectors.session_list import SessionFilters, matching_sessions
from telemetry.models import AgentProfile
from tests.db.test_console_views import report
from tests.db.test_overview import _plain_static, calls, key, viewer  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db
BERLIN = ZoneInfo("Europe/Berlin")


def _local(y: int, m: int, d: int, h: int, minute: int = 0) -> datetime:
    return datetime(y, m, d, h, minute, tzinfo=BERLIN)


def _fleet(agent_key: Any) -> None:
    """Three sessions by Berlin's clock: one late on 2026-12-01 (23:30, before UTC midnight),
    one on 2026-12-02, one a week earlier (the previous period)."""
    report(agent_key, calls("late", 2, start=_local(2026, 12, 1, 23, 30)))
    report(agent_key, calls("next-day", 3, start=_local(2026, 12, 2, 10)))
    report(agent_key, calls("week-before", 4, start=_local(2026, 11, 24, 12)))


def test_a_custom_range_in_a_zone_buckets_by_local_day_and_compares_with_the_week_before(
    key,  # noqa: F811
) -> None:
    _fleet(key)
    period = parse_period(
        {"from": "2026-11-30", "to": "2026-12-06", "tz": "Europe/Berlin", "compare": "previous"},
        now=timezone.now(),
    )
    found = load_overview(period)
    assert found.bucket == "day" and len(found.buckets) == 7
    by_day = {b.start.astimezone(BERLIN).date().isoformat(): b.calls for b in found.buckets}
    # 23:30 Berlin is 22:30 UTC: it counts on its local day, not the next UTC day
    assert by_day["2026-12-01"] == 2 and by_day["2026-12-02"] == 3
    assert all(b.start.astimezone(BERLIN).hour == 0 for b in found.buckets)
    assert found.calls == 5 and found.sessions == 2
    previous = found.previous
    assert previous is not None and previous.calls == 4 and previous.sessions == 1
    assert previous.cost > Decimal(0)


def test_the_sessions_list_takes_a_period_and_the_overview_drills_down_to_it(
    key,  # noqa: F811
    viewer,  # noqa: F811
) -> None:
    _fleet(key)
    page = viewer.get(
        "/",
        {"from": "2026-11-30", "to": "2026-12-06", "tz": "Europe/Berlin", "compare": "previous"},
    )
    assert page.status_code == 200
    html = page.content.decode()
    assert "Europe/Berlin, UTC+01:00" in html
    assert 'id="previous-spend"' in html and 'id="previous-calls"' in html
    # the table of buckets links each day to the sessions active in it
    links = [unescape(href) for href in re.findall(r'href="([^"]+)" class="drill"', html)]
    assert len(links) == 7
    day = next(link for link in links if "from=2026-12-01&" in link)
    assert day == f"{reverse('sessions')}?from=2026-12-01&to=2026-12-01&tz=Europe%2FBerlin"
    listed = viewer.get(day)
    assert listed.status_code == 200
    # From alone (what the list's fields send as soon as From changes): active since then
    since = viewer.get(reverse("sessions"), {"from": "2026-12-02", "tz": "Europe/Berlin"})
    assert since.status_code == 200
    assert [row.session.external_id for row in since.context["listing"].rows] == ["next-day"]
    rows = listed.context["listing"].rows
    assert [row.session.external_id for row in rows] == ["late"]
    # its last call (23:37 in Berlin, 22:37 UTC) is shown in the period's zone
    assert "2026-12-01 23:37" in listed.content.decode()
    # an hour bucket's link is to the minute, and the period filter is exact at its edges
    policies = load_policies()
    profiles = list(AgentProfile.objects.all())

    def active(first: datetime, last: datetime) -> set[str]:
        filters = SessionFilters(active_from=first, active_to=last)
        return {s.external_id for s in matching_sessions(filters, profiles, policies)}

    late = _local(2026, 12, 1, 23, 30)
    assert active(late, late + timedelta(minutes=1)) == {"late"}
    assert active(late - timedelta(minutes=1), late) == set()
    # the sessions export applies the same period
    exported = viewer.get(
        reverse("sessions_export", args=["csv"]) + day[len(reverse("sessions")) :]
    )
    body = b"".join(exported.streaming_content).decode()
    assert "late" in body and "next-day" not in body and "week-before" not in body


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"tz": "Mars/Base"}, "tz"),
        ({"from": "2026-12-02", "to": "2026-12-01"}, "to"),
        ({"range": "2w"}, "range"),
    ],
)
def test_a_bad_period_is_a_400_page_naming_the_field(
    viewer,  # noqa: F811
    params: dict[str, str],
    field: str,
) -> None:
    for url in ("/", reverse("cache"), reverse("spend_export", args=["csv"])):
        answer = viewer.get(url, params)
        assert answer.status_code == 400, url
        assert f"<code>{field}</code>" in answer.content.decode()
    if "from" in params:  # the list reads a zone only for its from and to
        assert viewer.get(reverse("sessions"), params).status_code == 400


def test_a_zone_given_in_the_url_is_remembered_for_the_next_page(viewer) -> None:  # noqa: F811
    first = viewer.get("/", {"range": "24h", "tz": "Asia/Tokyo"})
    assert first.cookies["console_tz"].value == "Asia/Tokyo"
    assert viewer.get("/").context["period"].zone == "Asia/Tokyo"
    viewer.cookies["console_tz"] = "not a zone"
    assert viewer.get("/").context["period"].zone == "UTC"


def test_the_refresh_sends_only_the_parts_that_changed(
    key,  # noqa: F811
    viewer: Client,  # noqa: F811
    time_machine,
) -> None:
    # the charts' axis follows a rolling period to the minute: the test runs within one minute
    time_machine.move_to(timezone.now().replace(second=5), tick=True)
    report(key, calls("live", 2, start=timezone.now() - timedelta(minutes=30)))
    page = viewer.get("/", {"range": "24h"}).content.decode()
    have = re.findall(r'class="part-key" name="have" value="([^"]+)"', page)
    assert {h.split(":")[0] for h in have} == {
        "totals",
        "bands",
        "charts",
        "compactions",
        "tops",
        "profiles",
    }
    live = reverse("overview_live")
    unchanged = viewer.get(live, {"range": "24h", "have": have})
    assert unchanged.status_code == 200
    assert (
        re.findall(r'<[a-z]+ [^>]*id="([a-z-]+)"[^>]*hx-swap-oob', unchanged.content.decode()) == []
    )
    report(key, calls("live-2", 1, start=timezone.now() - timedelta(minutes=5)))
    changed = viewer.get(live, {"range": "24h", "have": have}).content.decode()
    assert 'id="totals"' in changed and 'hx-swap-oob="true"' in changed
    assert 'id="compactions"' not in changed  # no compaction happened: not sent again
    # a minute on, the rolling period's axis has moved: the charts are sent again
    time_machine.shift(timedelta(minutes=1))
    moved = viewer.get(live, {"range": "24h", "have": have}).content.decode()
    assert 'id="overview-charts"' in moved


def test_the_read_api_takes_the_same_period(agent) -> None:
    def get(path: str, **params: str) -> Any:
        return agent.get(f"{path}?{urlencode(params)}")

    report(agent.key, calls("api-late", 2, start=_local(2026, 12, 1, 23, 30)))
    day = {"from": "2026-12-01", "to": "2026-12-01", "tz": "Europe/Berlin"}
    body = get("/api/v1/overview", **day, compare="previous").json()
    assert body["range"] == "custom" and body["time_zone"] == "Europe/Berlin"
    assert body["since"] == "2026-11-30T23:00:00+00:00"
    assert body["until"] == "2026-12-01T23:00:00+00:00"
    assert body["calls"] == 2 and body["previous"]["calls"] == 0
    assert [b["start"] for b in body["buckets"]][:2] == [
        "2026-12-01T00:00:00+01:00",
        "2026-12-01T01:00:00+01:00",
    ]
    listed = get("/api/v1/sessions", **day).json()
    assert [s["session_id"] for s in listed["sessions"]] == ["api-late"]
    assert (
        get("/api/v1/sessions", **{**day, "from": "2026-12-02", "to": "2026-12-03"}).json()[
            "sessions"
        ]
        == []
    )
    # a lone bound is open: from alone runs until now, to alone looks back until then
    since = get("/api/v1/overview", **{"from": "2026-12-01", "tz": "Europe/Berlin"}).json()
    assert since["since"] == "2026-11-30T23:00:00+00:00" and since["calls"] == 2
    until = get("/api/v1/sessions", to="2026-11-30", tz="Europe/Berlin").json()
    assert until["sessions"] == []
    assert [
        s["session_id"] for s in get("/api/v1/sessions", to="2026-12-01").json()["sessions"]
    ] == ["api-late"]
    refused = get("/api/v1/overview", **{"from": "2099-12-01", "tz": "Europe/Berlin"})
    assert refused.status_code == 422 and refused.json()["field"] == "from"
    assert get("/api/v1/sessions", **{**day, "tz": "Nowhere/x"}).json()["field"] == "tz"


def test_the_alerts_history_shows_any_time_or_the_alerts_fired_in_a_period(viewer) -> None:  # noqa: F811
    from alerts.models import Alert
    from alerts.services import RuleValues, create_rule

    rule = create_rule(RuleValues(name="costly", metric="session_cost", threshold=1, profile=None))
    for subject, at in (
        ("session:1", _local(2026, 12, 1, 23, 30)),
        ("session:2", _local(2026, 12, 3, 9)),
    ):
        Alert.objects.create(rule=rule, subject=subject, value=Decimal(2), fired_at=at)
    everything = viewer.get(reverse("alerts")).context["alerts"]
    assert len(everything) == 2
    day = {"from": "2026-12-01", "to": "2026-12-01", "tz": "Europe/Berlin"}
    page = viewer.get(reverse("alerts"), day)
    assert [a.subject for a in page.context["alerts"]] == ["session:1"]
    html = page.content.decode()
    assert "2026-12-01 23:30" in html  # in the zone asked for, not 22:30 UTC
    assert "fired in 2026-12-01 – 2026-12-01" in html
    assert viewer.get(reverse("alerts"), {"tz": "Mars/Base"}).status_code == 400


def test_the_cache_page_and_its_summary_take_the_period(key, viewer) -> None:  # noqa: F811
    """Two weeks unless another period is picked; the overview's section compares with the
    previous period when asked; each premium bar links to its bucket's sessions."""
    report(key, calls("cached", 3, start=timezone.now() - timedelta(minutes=40)))
    page = viewer.get(reverse("cache"))
    assert page.context["period"].preset == "14d"
    assert len(page.context["drill"]) == len(page.context["period"].bucket_starts())
    berlin = viewer.get(reverse("cache"), {"range": "24h", "tz": "Europe/Berlin"})
    assert berlin.context["period"].bucket == "hour"
    assert all("tz=Europe%2FBerlin" in link for link in berlin.context["drill"])
    summary = viewer.get(
        reverse("cache_summary"),
        {"range": "24h", "compare": "previous"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert 'id="previous-premium"' in summary and "in the last 24h" in summary


def test_every_page_shows_its_times_in_the_operators_zone_and_the_api_keeps_utc(agent) -> None:
    from telemetry.models import AgentSession
    from tests.db.conftest import signed_in

    # 22:37 UTC on 2026-12-01 is 07:37 the next morning in Tokyo
    report(
        agent.key, calls("tokyo", 1, start=datetime(2026, 12, 1, 22, 37, tzinfo=ZoneInfo("UTC")))
    )
    session = AgentSession.objects.get(external_id="tokyo")
    page = signed_in("viewer", "zoned")
    page.cookies["console_tz"] = "Asia/Tokyo"
    html = page.get(reverse("session", args=[session.pk])).content.decode()
    assert "2026-12-02 07:37" in html and "2026-12-01 22:37" not in html
    assert '<span id="time-zone">Asia/Tokyo</span>' in html
    # ?tz= wins over the remembered zone; a zone that is not one falls back to it
    html = page.get(reverse("session", args=[session.pk]), {"tz": "UTC"}).content.decode()
    assert "2026-12-01 22:37" in html and '<span id="time-zone">UTC</span>' in html
    html = page.get(reverse("session", args=[session.pk]), {"tz": "Mars/x"}).content.decode()
    assert "2026-12-02 07:37" in html
    # the API's times stay ISO 8601 in UTC whatever the browser remembers
    agent.client.cookies["console_tz"] = "Asia/Tokyo"
    body = agent.get("/api/v1/sessions/tokyo").json()
    assert body["last_seen_at"].startswith("2026-12-01T22:37") and body["last_seen_at"].endswith(
        ("+00:00", "Z")
    )
