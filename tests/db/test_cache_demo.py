"""The demo data (manage.py simulate) shows misses of every cause, each with a premium."""

from __future__ import annotations

import io
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.test.utils import override_settings
from pytest_django.live_server_helper import LiveServer

from compaction.cache_report import fleet_cache, session_misses
from telemetry.cache_misses import CAUSES
from telemetry.models import AgentSession
from telemetry.otlp.costs import agent_cost
from telemetry.seeding import ensure_defaults

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    with override_settings(SECURE_SSL_REDIRECT=False):
        server = LiveServer("localhost")
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(autouse=True)
def _defaults(settings: Any) -> None:
    ensure_defaults()
    settings.COMPACTION_AUTO_ENQUEUE = False


# The cache demo's own sessions beside the smallest traffic: the fleet's traffic and its
# compactions are tests/db/test_simulate.py's subject, not this file's.
SMALL = {"sessions": 1, "no_compaction": True, "cache_demo": True}


def test_demo_misses_have_every_cause_and_each_a_premium(live_server: LiveServer) -> None:
    out = io.StringIO()
    call_command("simulate", base_url=live_server.url, stdout=out, **SMALL)
    assert "Cache-miss causes demo: cache-causes, cache-volatile-system, cache-compacted." in (
        out.getvalue()
    )
    seen: set[str] = set()
    for session in AgentSession.objects.select_related("profile"):
        for miss in session_misses(session).misses:
            seen.add(miss.cause)
            unpriced = session.unpriced_calls > 0
            assert miss.premium_usd is not None or unpriced, (session.external_id, miss)
            assert miss.evidence
    assert seen == set(CAUSES)
    causes = [
        m.cause for m in session_misses(AgentSession.objects.get(external_id="cache-causes")).misses
    ]
    assert causes == ["model_switch", "expiry", "agent_compaction", "unexplained"]
    volatile = session_misses(AgentSession.objects.get(external_id="cache-volatile-system"))
    assert {m.cause for m in volatile.misses} == {"prefix_break"} and volatile.churn.violates_d2
    (ours,) = session_misses(AgentSession.objects.get(external_id="cache-compacted")).misses
    assert ours.cause == "our_compaction"
    fleet = fleet_cache()
    assert fleet.profiles["desktop"].churn.violates_d2
    assert not fleet.profiles["default"].churn.violates_d2
    assert all(fleet.by_cause[c] > Decimal(0) for c in CAUSES)
    # issue 38: Claude Code's own cost and ours agree under the 1h desktop profile
    assert "Claude Code demo (OTLP events, 1h profile): claude-code-desktop." in out.getvalue()
    claude_code = agent_cost(AgentSession.objects.get(external_id="claude-code-desktop"))
    assert claude_code.calls == 3 and claude_code.differing_calls == 0
    assert claude_code.ours_usd == claude_code.agent_usd == Decimal("0.1608084")
    # a second run sends nothing twice
    again = io.StringIO()
    call_command("simulate", base_url=live_server.url, stdout=again, quiet=True, **SMALL)
    assert AgentSession.objects.filter(external_id="cache-causes").count() == 1
