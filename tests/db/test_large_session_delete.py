"""A session with more calls than one statement can carry parameters (65,535 under the wire
protocol's server-side binding) can still be deleted: the admin's or a shell's
`session.delete()` sets its calls' context events' `call` to NULL and deletes the calls with
one `IN` list each on PostgreSQL (Django 5.2 does not split them there).

That holds because `console.settings` keeps psycopg's client-side binding by default; with
`DB_SERVER_SIDE_BINDING=true` such a delete fails ("number of parameters must be between 0
and 65535"), which is why the faster binding is an operator's opt-in (docs/configuration.md)."""

from __future__ import annotations

import pytest
from django.db import connection

from bench.bulk import seed_calls
from telemetry.models import AgentSession, LLMCall
from telemetry.profiles import get_or_create_profile

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's wire protocol"),
]

CALLS = 66_000  # past 65,535


def test_a_session_with_more_calls_than_a_statements_parameters_can_be_deleted() -> None:
    profile = get_or_create_profile(name="long-runner")
    session = AgentSession.objects.create(profile=profile, external_id="long-session")
    seed_calls("s.id = %s", [session.pk], turns=CALLS // 2, calls_per_turn=2)
    assert LLMCall.objects.filter(session=session).count() == CALLS

    session.delete()

    assert not AgentSession.objects.filter(pk=session.pk).exists()
    assert not LLMCall.objects.filter(session_id=session.pk).exists()
