"""Failed automatic relief is retried with backoff, given up loudly at the cap, and seen fleet-wide
(issue 38): `compaction.sweeper`, `compaction.relief_state`, `/metrics`.

The sweeper is driven directly; what a worker does with a job it publishes is done here by
`run_relief_job` (the task's body, then its `on_failure` once Celery's retries are spent). The
broker is replaced by a list of published session ids. Time moves with time-machine.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from compaction import services
from compaction.models import CompactionRun
from compaction.relief_state import (
    GIVEN_UP,
    ReliefCounts,
    ReliefState,
    in_relief_state,
    relief_counts,
    retry_delay,
    session_relief_states,
)
from compaction.sweeper import sweep_sessions_over_threshold
from telemetry import relief_dispatch
from telemetry.models import AgentSession
from tests.db.test_compaction_worker import session_over_threshold

pytestmark = pytest.mark.django_db

DOWN = "http://127.0.0.1:9"  # nothing listens there: the summarizer fails at once


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[list[int]]:
    """Relief jobs the sweeper publishes, instead of a broker."""
    sent: list[int] = []

    def publish(session_id: int) -> bool:
        sent.append(session_id)
        return True

    monkeypatch.setattr(relief_dispatch, "publish", publish)
    settings.RELIEF_RETRY_BASE_SECONDS = 60
    settings.RELIEF_RETRY_MAX_ATTEMPTS = 3
    yield sent


@pytest.fixture
def failing_session(make_agent, settings: Any) -> AgentSession:
    """A session over its summarize threshold whose first automatic relief failed."""
    settings.COMPACTION_AUTO_ENQUEUE = False  # ingest asks nothing: the test runs the jobs
    session = session_over_threshold(make_agent("default"), "stuck-1")
    settings.COMPACTION_AUTO_ENQUEUE = True
    settings.COMPACTION_SUMMARIZER_URL = DOWN
    run_relief_job(session.pk)
    return session


_jobs = iter(range(1, 1_000))


def run_relief_job(session_id: int) -> CompactionRun:
    """What the worker does with one relief job: the task body, and `on_failure` when it
    raises (Celery's own retries are spent)."""
    task_id = f"job-{next(_jobs)}"
    try:
        outcome = services.relieve_session(session_id=session_id, task_id=task_id)
    except Exception as exc:
        return services.record_failed_run(session_id=session_id, error=str(exc), task_id=task_id)
    assert outcome is not None
    return outcome.run


def latest_auto_run(session: AgentSession) -> CompactionRun:
    return CompactionRun.objects.filter(session=session, mode="auto").latest("pk")


def latest_failure(session: AgentSession) -> datetime:
    finished = latest_auto_run(session).finished_at
    assert finished is not None
    return finished


def test_a_failed_relief_is_retried_with_backoff_and_given_up_loudly_at_the_cap(
    failing_session, published, time_machine, caplog
):
    session = failing_session
    assert latest_auto_run(session).status == "failed"
    assert session_relief_states([session.pk]) == {session.pk: ReliefState.FAILING}
    for failures in (1, 2):
        failed_at = latest_failure(session)
        # not before its backoff (base doubled per failure in a row)...
        time_machine.move_to(failed_at + retry_delay(failures) - timedelta(seconds=1), tick=False)
        assert sweep_sessions_over_threshold() == [] and published == []
        # ...then once, and it fails again
        time_machine.move_to(failed_at + retry_delay(failures), tick=False)
        assert sweep_sessions_over_threshold() == [session.pk] == published
        assert session_relief_states([session.pk]) == {session.pk: ReliefState.FAILING}
        published.clear()
        assert run_relief_job(session.pk).status == "failed"
    # three failed in a row: the sweeper gives up, says so once, and asks no more
    assert session_relief_states([session.pk]) == {session.pk: ReliefState.GIVEN_UP}
    time_machine.move_to(latest_failure(session) + timedelta(hours=6), tick=False)
    with caplog.at_level(logging.WARNING, logger="compaction"):
        assert sweep_sessions_over_threshold() == []
        assert sweep_sessions_over_threshold() == []
    assert published == []
    given_up = [r for r in caplog.records if "given up" in r.getMessage()]
    assert len(given_up) == 1 and given_up[0].levelno == logging.WARNING
    assert f"session {session.pk}" in given_up[0].getMessage()
    last = latest_auto_run(session)
    assert last.status == "failed" and last.reason.startswith(GIVEN_UP)
    assert "3 failed automatic reliefs in a row" in last.reason
    assert CompactionRun.objects.filter(session=session, mode="auto").count() == 3


def test_a_given_up_session_shows_on_metrics_until_a_relief_succeeds(
    failing_session, published, time_machine, client, settings
):
    session = failing_session
    settings.RELIEF_RETRY_MAX_ATTEMPTS = 1
    default = (("profile", "default"),)
    assert sweep_sessions_over_threshold() == []
    assert scrape(client)["compaction_relief_given_up_sessions"][default] == 1
    assert scrape(client)["compaction_relief_failing_sessions"][default] == 0
    # the next append asks for relief as usual; with the summarizer back it succeeds
    settings.COMPACTION_SUMMARIZER_URL = ""
    assert run_relief_job(session.pk).status == "applied"
    samples = scrape(client)
    assert samples["compaction_relief_given_up_sessions"][default] == 0
    assert samples["compaction_relief_failing_sessions"][default] == 0


def test_a_retry_that_succeeds_clears_the_failing_state(
    failing_session, published, time_machine, settings
):
    session = failing_session
    assert relief_counts()[session.profile_id] == ReliefCounts(failing=1)
    settings.COMPACTION_SUMMARIZER_URL = ""  # the summarizer is back (the extractive default)
    time_machine.move_to(latest_failure(session) + retry_delay(1), tick=False)
    assert sweep_sessions_over_threshold() == [session.pk] == published
    # queued again: still failing until the retry succeeds
    assert session_relief_states([session.pk]) == {session.pk: ReliefState.FAILING}
    assert run_relief_job(session.pk).status == "applied"
    # the streak is over; the relieved surface (still at 0.61 of its window: the telemetry's
    # system prompt and tools are not in the log) waits for its own relief, as any new version
    assert session_relief_states([session.pk]) == {session.pk: ReliefState.PENDING}
    assert relief_counts()[session.profile_id] == ReliefCounts(pending=1)
    assert not in_relief_state(AgentSession.objects.all(), ReliefState.FAILING).exists()


def test_the_list_filter_finds_failing_and_pending_sessions(failing_session, make_agent, settings):
    settings.COMPACTION_AUTO_ENQUEUE = False
    pending = session_over_threshold(make_agent("default"), "waiting-1")
    sessions = AgentSession.objects.all()
    assert list(in_relief_state(sessions, ReliefState.FAILING).values_list("pk", flat=True)) == [
        failing_session.pk
    ]
    assert list(in_relief_state(sessions, ReliefState.PENDING).values_list("pk", flat=True)) == [
        pending.pk
    ]
    assert relief_counts() == {failing_session.profile_id: ReliefCounts(pending=1, failing=1)}


def scrape(client: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = client.get("/metrics")
    assert response.status_code == 200
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def nonzero(series: dict[Any, float]) -> dict[Any, float]:
    return {labels: value for labels, value in series.items() if value}


def test_metrics_give_each_profile_its_bands_spend_cache_hit_and_relief_states(
    failing_session, make_agent, client, settings
):
    settings.COMPACTION_AUTO_ENQUEUE = False
    outsider = make_agent("outsiders")
    response = outsider.post(
        "/api/v1/telemetry",
        {
            "session_id": "o-1",
            "turn": 0,
            "provider": "anthropic",
            "model": "no-such-model-xyz",
            "usage": {"input_tokens": 1_000, "output_tokens": 10},
        },
    )
    assert response.status_code == 201, response.content
    samples = scrape(client)
    default = (("profile", "default"),)
    outsiders = (("profile", "outsiders"),)
    bands = samples["telemetry_sessions_in_band"]
    assert bands[(("band", "compact"), ("profile", "default"))] == 1
    assert bands[(("band", "unknown"), ("profile", "outsiders"))] == 1
    assert sum(bands.values()) == 2
    # every profile has a sample of each count, zero included (seeded profiles too)
    assert set(samples["compaction_relief_failing_sessions"]) >= {
        default,
        outsiders,
    }
    assert nonzero(samples["compaction_relief_failing_sessions"]) == {default: 1}
    assert nonzero(samples["compaction_relief_given_up_sessions"]) == {}
    assert nonzero(samples["compaction_relief_pending_sessions"]) == {}
    assert samples["telemetry_spend_usd"][default] > 0
    assert samples["telemetry_spend_usd"][outsiders] == 0
    assert nonzero(samples["telemetry_unpriced_calls"]) == {outsiders: 1}
    # 148,000 of the call's 150,000 context tokens were cache reads
    assert samples["telemetry_cache_hit_ratio"][default] == pytest.approx(148_000 / 150_000)


def test_a_scrape_costs_the_same_queries_whatever_the_number_of_sessions(
    failing_session, make_agent, client, settings
):
    def scrape_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/metrics").status_code == 200
        return len(queries)

    settings.COMPACTION_AUTO_ENQUEUE = False
    agent = make_agent("default")
    few = scrape_queries()
    for n in range(6):
        session_over_threshold(agent, f"more-{n}")
    assert scrape_queries() == few
    assert scrape(client)["compaction_relief_pending_sessions"][(("profile", "default"),)] == 6
