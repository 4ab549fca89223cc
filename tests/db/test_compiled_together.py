"""Compiled reads run together and prepared (`telemetry.compiled.run_reads`) read what each
read alone through a cursor reads: the overview's statements and the page's relief counts and
open alerts, for the fleet and for one profile, with sessions in every relief state."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerts.models import Alert
from alerts.services import RuleValues, create_rule
from compaction.relief_state import profile_policies, relief_counts, relief_counts_from
from console.overview import Overview, load_overview
from console.overview_views import _beside
from telemetry.compiled import run_reads
from telemetry.ingest import pg_prepared
from telemetry.models import AgentSession
from tests.db.test_relief_loud import fleet
from tests.db.test_relief_retry import failing_session, published

pytestmark = pytest.mark.django_db
__all__ = ["failing_session", "fleet", "published"]  # fixtures this module uses


def _figures(found: Overview) -> dict[str, Any]:
    """Everything an overview read, its sessions by key and its page's reads by their rows."""
    figures = {f.name: getattr(found, f.name) for f in fields(found) if f.name != "beside"}
    figures["top_cost"] = [(s.pk, s.cost_usd, s.last_seen_at) for s in found.top_cost]
    figures["top_pressure"] = [(s.pk, s.pressure, band) for s, band in found.top_pressure]
    figures["beside"] = [result.dicts() for result in found.beside]
    return figures


@pytest.mark.parametrize("profile", ["", "default", "no-such-profile"])
def test_the_overview_reads_the_same_together_and_prepared_as_one_by_one(
    fleet: dict[str, AgentSession], settings: Any, profile: str
) -> None:
    rule = create_rule(RuleValues(name="r", metric="session_cost", threshold=1, profile=None))
    for n in range(3):
        resolved = timezone.now() if n == 2 else None
        Alert.objects.create(
            rule=rule,
            subject=f"session:{n}",
            value=2,
            fired_at=timezone.now(),
            resolved_at=resolved,
        )
    now = timezone.now()
    together = load_overview("30d", profile, now, beside=_beside)
    settings.DB_PREPARED_STATEMENTS = False  # each through a cursor, as behind a pooler
    alone = load_overview("30d", profile, now, beside=_beside)
    assert _figures(together) == _figures(alone)
    relief, firing = together.beside
    assert relief_counts_from(relief) == relief_counts(profile_policies())
    assert sum(c.trouble for c in relief_counts_from(relief).values()) == 3
    assert firing.dicts() == [{"n": 2}]


def test_the_open_alerts_count_is_no_row_when_none_is_open(fleet: dict[str, AgentSession]) -> None:
    found = load_overview("30d", beside=_beside)
    assert found.beside[1].dicts() == []


@pytest.mark.parametrize("prepared", [True, False])
def test_reads_run_together_are_each_counted_with_their_values(
    fleet: dict[str, AgentSession], settings: Any, prepared: bool
) -> None:
    """Each statement of a round trip is in Django's query log, its values in its text, as
    Django logs its own (the query counts of the page's tests count statements)."""
    settings.DB_PREPARED_STATEMENTS = prepared
    policies = profile_policies()
    if connection.vendor == "postgresql":
        pg_prepared.deallocate_all(connection.connection)
    reads = _beside(policies)
    with CaptureQueriesContext(connection) as queries:
        results = run_reads(reads)
    assert len(queries.captured_queries) == len(reads) == len(results)
    assert all("%s" not in q["sql"] for q in queries.captured_queries)
    assert [r.read for r in results] == reads
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%alerts_alert%"],
            )
            assert cursor.fetchone() == (1 if prepared else 0,)


def test_an_empty_list_of_reads_reads_nothing() -> None:
    with CaptureQueriesContext(connection) as queries:
        assert run_reads([]) == []
    assert queries.captured_queries == []
