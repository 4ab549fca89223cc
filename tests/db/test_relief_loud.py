"""Relief in trouble is seen fleet-wide (issue 38, item 1; D5: loud): the sessions list's flag and
`?relief=` filter, the overview's counts with links, the session page's notice and run anchors,
and pending-too-long on `/metrics`. The relief jobs are run in-process (`run_relief_job`, the
task body); `test_relief_worker.py` runs them through a real worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from compaction.models import CompactionRun
from compaction.relief_state import (
    ReliefCounts,
    ReliefState,
    profile_policies,
    relief_counts,
    session_reliefs,
)
from console.overview import load_overview
from console.selectors.relief import relief_summary
from telemetry.models import AgentSession
from tests.db.test_compaction_worker import session_over_threshold
from tests.db.test_relief_retry import (
    failing_session,
    latest_auto_run,
    published,
    run_relief_job,
    scrape,
)

pytestmark = pytest.mark.django_db
__all__ = ["failing_session", "published"]  # fixtures this module uses


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    """Templates resolve {% static %} without a collectstatic manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


def listed(response: Any) -> list[str]:
    """The session ids a sessions list page shows, in order."""
    assert response.status_code == 200
    return re.findall(
        r'<a href="/sessions/\d+/" class="mono">([^<]+)</a>', response.content.decode()
    )


@pytest.fixture
def fleet(
    failing_session: AgentSession, published: list[int], make_agent: Any, settings: Any
) -> dict[str, AgentSession]:
    """One session in each relief state: failing (1 failure), given up (3 in a row, the cap),
    pending (over its threshold, not yet asked), overdue (its job asked for 10 minutes ago and
    not finished), and one well below its threshold ("calm")."""
    settings.COMPACTION_AUTO_ENQUEUE = False  # the test runs the jobs
    agent = make_agent("default")
    given_up = session_over_threshold(agent, "stuck-2")
    for _ in range(3):
        assert run_relief_job(given_up.pk).status == "failed"
    pending = session_over_threshold(agent, "waiting-1")
    overdue = session_over_threshold(agent, "lost-job-1")
    # the claim ingest or the sweeper sets when it publishes the job; the job never finished
    AgentSession.objects.filter(pk=overdue.pk).update(
        relief_requested_at=timezone.now() - timedelta(minutes=10)
    )
    response = agent.post(
        "/api/v1/telemetry",
        {
            "session_id": "calm-1",
            "turn": 0,
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {"input_tokens": 1_000, "output_tokens": 10},
        },
    )
    assert response.status_code == 201, response.content
    return {
        "failing": failing_session,
        "given_up": given_up,
        "pending": pending,
        "overdue": overdue,
        "calm": AgentSession.objects.get(external_id="calm-1"),
    }


def test_each_session_has_its_relief_state(fleet: dict[str, AgentSession]) -> None:
    reliefs = session_reliefs([s.pk for s in fleet.values()])
    assert {name: reliefs[s.pk].state for name, s in fleet.items()} == {
        "failing": ReliefState.FAILING,
        "given_up": ReliefState.GIVEN_UP,
        "pending": ReliefState.PENDING,
        "overdue": ReliefState.PENDING,
        "calm": ReliefState.NONE,
    }
    assert [name for name, s in fleet.items() if reliefs[s.pk].overdue] == ["overdue"]
    assert [name for name, s in fleet.items() if reliefs[s.pk].trouble] == [
        "failing",
        "given_up",
        "overdue",
    ]
    assert reliefs[fleet["given_up"].pk].failures == 3
    assert reliefs[fleet["failing"].pk].failed_run == latest_auto_run(fleet["failing"]).pk
    profile = fleet["failing"].profile_id
    assert relief_counts()[profile] == ReliefCounts(pending=2, failing=1, given_up=1, overdue=1)


@pytest.mark.parametrize(
    ("relief", "expected"),
    [
        ("failing", {"stuck-1"}),
        ("given_up", {"stuck-2"}),
        ("pending", {"waiting-1", "lost-job-1"}),
        ("overdue", {"lost-job-1"}),
        ("any-trouble", {"stuck-1", "stuck-2", "lost-job-1"}),
        ("", {"stuck-1", "stuck-2", "waiting-1", "lost-job-1", "calm-1"}),
        ("no-such-state", {"stuck-1", "stuck-2", "waiting-1", "lost-job-1", "calm-1"}),
    ],
)
def test_the_sessions_list_filters_by_relief_state(
    fleet: dict[str, AgentSession],
    client_as: Callable[..., Client],
    relief: str,
    expected: set[str],
) -> None:
    response = client_as("viewer").get(reverse("sessions"), {"relief": relief})
    shown = listed(response)
    assert set(shown) == expected and len(shown) == len(expected)
    page = response.content.decode()
    count = len(expected)
    assert f"{count} session{'s' if count != 1 else ''}" in page
    if relief in ("failing", "given_up", "pending", "overdue", "any-trouble"):
        assert f'<option value="{relief}" selected>' in page


def test_the_filter_combines_with_the_others_sorts_and_pages(
    fleet: dict[str, AgentSession], client_as: Callable[..., Client]
) -> None:
    client = client_as("viewer")
    assert listed(client.get(reverse("sessions"), {"relief": "any-trouble", "q": "stuck"})) in (
        ["stuck-1", "stuck-2"],
        ["stuck-2", "stuck-1"],
    )
    assert listed(client.get(reverse("sessions"), {"relief": "any-trouble", "profile": "x"})) == []
    by_id = client.get(reverse("sessions"), {"relief": "any-trouble", "sort": "session"})
    assert listed(by_id) == ["lost-job-1", "stuck-1", "stuck-2"]
    # the htmx table keeps the filter in its poll URL and its pager links
    table = client.get(
        reverse("sessions") + "?relief=failing", headers={"HX-Request": "true"}
    ).content.decode()
    assert 'hx-get="/sessions/?relief=failing"' in table


def test_the_list_flags_each_row_and_links_to_the_failed_run(
    fleet: dict[str, AgentSession], client_as: Callable[..., Client]
) -> None:
    page = client_as("viewer").get(reverse("sessions")).content.decode()
    rows = {
        name: page[page.index(f">{s.external_id}</a>") :].split("</tr>", 1)[0]
        for name, s in fleet.items()
    }
    failing_run = latest_auto_run(fleet["failing"]).pk
    given_up_run = latest_auto_run(fleet["given_up"]).pk
    assert (
        f'<a href="/sessions/{fleet["failing"].pk}/#run-{failing_run}" class="flag hard'
        ' relief-failing"' in rows["failing"]
    )
    assert ">relief failing</a>" in rows["failing"]
    assert f'href="/sessions/{fleet["given_up"].pk}/#run-{given_up_run}"' in rows["given_up"]
    assert ">relief given up</a>" in rows["given_up"]
    assert "failed 3 times in a row" in rows["given_up"]
    assert ">relief pending too long</span>" in rows["overdue"]
    assert ">relief pending</span>" in rows["pending"]
    assert "relief" not in rows["calm"]


def test_the_list_costs_the_same_queries_filtered_by_relief_for_few_or_many(
    fleet: dict[str, AgentSession],
    client_as: Callable[..., Client],
    make_agent: Any,
    held_remembered_reads: None,
) -> None:
    client = client_as("viewer")

    def count() -> int:
        client.get(reverse("sessions"), {"relief": "any-trouble"})
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("sessions"), {"relief": "any-trouble"}).status_code == 200
        return len(queries)

    few = count()
    agent = make_agent("default")
    for n in range(4):
        session = session_over_threshold(agent, f"more-{n}")
        run_relief_job(session.pk)  # fails: the summarizer is down
    assert len(listed(client.get(reverse("sessions"), {"relief": "any-trouble"}))) == 7
    assert count() == few


def test_the_overview_counts_relief_in_trouble_with_links(
    fleet: dict[str, AgentSession], client_as: Callable[..., Client]
) -> None:
    page = client_as("viewer").get(reverse("overview")).content.decode()
    section = page[page.index('id="relief"') :].split("</section>", 1)[0]
    assert '<a href="/sessions/?relief=any-trouble"><strong>3 sessions</strong></a>' in section
    assert (
        'href="/sessions/?relief=failing" class="flag hard" id="relief-failing">1 relief failing<'
        in section
    )
    assert (
        'href="/sessions/?relief=given_up" class="flag hard" id="relief-given-up">1 given up<'
        in section
    )
    assert (
        'href="/sessions/?relief=overdue" class="flag soft" id="relief-overdue">1 pending too long<'
        in section
    )
    assert 'href="/sessions/?relief=pending">2 sessions pending</a>' in section
    # the sessions in trouble, each linked to its latest failed run (or its relief notice)
    failing_run = latest_auto_run(fleet["failing"]).pk
    assert f'href="/sessions/{fleet["failing"].pk}/#run-{failing_run}"' in section
    assert f'href="/sessions/{fleet["overdue"].pk}/#relief-state"' in section
    assert "calm-1" not in section and "waiting-1" not in section


def test_the_overview_of_one_profile_counts_that_profile_only(
    fleet: dict[str, AgentSession], client_as: Callable[..., Client], make_agent: Any
) -> None:
    make_agent("quiet")
    client = client_as("viewer")
    quiet = client.get(reverse("overview"), {"profile": "quiet"}).content.decode()
    section = quiet[quiet.index('id="relief"') :].split("</section>", 1)[0]
    assert 'id="relief-ok"' in section and "?relief=" not in section
    default = client.get(reverse("overview"), {"profile": "default"}).content.decode()
    assert 'href="/sessions/?relief=failing&amp;profile=default"' in default
    assert relief_summary("no-such-profile").counts == ReliefCounts()
    assert relief_summary("default").counts.trouble == 3
    # the overview hands the panel the policies it read for the bands: the same as the panel's own
    found = load_overview("30d", "default")
    assert found.policies == profile_policies()
    assert relief_summary("default", found.policies) == relief_summary("default")


def test_the_session_page_says_where_relief_stands_and_anchors_each_run(
    fleet: dict[str, AgentSession], client_as: Callable[..., Client]
) -> None:
    client = client_as("viewer")
    given_up = fleet["given_up"]
    page = client.get(reverse("session", args=[given_up.pk])).content.decode()
    runs = list(CompactionRun.objects.filter(session=given_up))
    assert len(runs) == 3
    for run in runs:
        assert f'<tr class="run-failed" id="run-{run.pk}">' in page
    notice = page[page.index('id="relief-state"') :].split("</p>", 1)[0]
    assert "relief given up" in notice and "failed 3 times in a row" in notice
    assert f'<a href="#run-{latest_auto_run(given_up).pk}">' in notice

    failing = client.get(reverse("session", args=[fleet["failing"].pk])).content.decode()
    notice = failing[failing.index('id="relief-state"') :].split("</p>", 1)[0]
    assert "relief failing" in notice and "failed 1 time in a row" in notice
    # RELIEF_RETRY_BASE_SECONDS (60) after the failure, a few seconds ago
    wait = re.search(r"tries again in about (\d+) s", notice)
    assert wait is not None and 30 < int(wait.group(1)) <= 60, notice

    overdue = client.get(reverse("session", args=[fleet["overdue"].pk])).content.decode()
    assert "relief pending too long" in overdue
    calm = client.get(reverse("session", args=[fleet["calm"].pk])).content.decode()
    assert 'id="relief-state"' not in calm


def test_metrics_count_relief_pending_too_long(
    fleet: dict[str, AgentSession], client: Client, settings: Any
) -> None:
    default = (("profile", "default"),)
    samples = scrape(client)
    assert samples["compaction_relief_overdue_sessions"][default] == 1
    assert samples["compaction_relief_pending_sessions"][default] == 2
    assert samples["compaction_relief_failing_sessions"][default] == 1
    assert samples["compaction_relief_given_up_sessions"][default] == 1
    settings.RELIEF_PENDING_TOO_LONG_SECONDS = 3_600  # ten minutes is no longer too long
    assert scrape(client)["compaction_relief_overdue_sessions"][default] == 0


def test_the_sweep_interval_setting_sets_beat_s_cadence() -> None:
    env = os.environ | {"COMPACTION_SWEEP_INTERVAL_SECONDS": "7"}
    code = (
        "import django; django.setup(); from django.conf import settings;"
        "print(settings.CELERY_BEAT_SCHEDULE['compaction-sweep']['schedule'])"
    )
    env["DJANGO_SETTINGS_MODULE"] = "console.settings"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "7.0"


def test_the_relief_counts_read_the_candidates_indexes_not_every_session(
    fleet: dict[str, AgentSession],
) -> None:
    """Among 5,000 sessions over their threshold without a transcript (nothing to relieve), the
    counts read the candidates through `session_relief_over` and `session_relief_asked` (a few
    entries each), not the sessions table: its cost follows the sessions in relief, not the
    fleet."""
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    from bench import bulk

    profile = fleet["pending"].profile
    bulk.seed_sessions(profile.pk, "idle-", 5_000)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE telemetry_agentsession SET pressure = 0.95 WHERE external_id LIKE 'idle-%%'"
        )
        cursor.execute("ANALYZE telemetry_agentsession")
    expected = relief_counts()
    with CaptureQueriesContext(connection) as queries:
        assert relief_counts() == expected
    sql = next(q["sql"] for q in queries.captured_queries if "relief_requested_at" in q["sql"])
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "session_relief_over" in plan and "session_relief_asked" in plan, plan
    assert "Seq Scan on telemetry_agentsession" not in plan, plan
    counts = expected[profile.pk]
    assert (counts.pending, counts.failing, counts.given_up) == (2, 1, 1)
