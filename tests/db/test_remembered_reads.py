"""The effective policy and the model catalogue an agent key's requests use are remembered per
process for at most a second: ingest skips two queries a request, and a change made anywhere
applies within a second on every process (at once in the process that made it)."""

from __future__ import annotations

import json
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext

from telemetry.catalogue import CATALOGUE_CACHE_SECONDS, key_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import CatalogueModel, Policy
from telemetry.policy_store import POLICY_CACHE_SECONDS, effective_policy, key_policy, update_policy
from tests.db.conftest import _database_url_for_worker
from tests.live import gunicorn, service_env


class Clock:
    def __init__(self) -> None:
        self.now = 5_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.django_db
def test_a_remembered_policy_costs_no_query_and_expires_after_its_age_limit() -> None:
    issued = create_agent_key(profile_name="default")
    key, profile = issued.key.pk, issued.key.profile
    clock = Clock()
    before = key_policy(key, profile, clock=clock)
    # Changed behind this process's back (as another process would): still remembered ...
    Policy.objects.filter(is_global=True).update(round_soft_limit=before.round_soft_limit + 7)
    clock.now += POLICY_CACHE_SECONDS / 2
    with CaptureQueriesContext(connection) as ctx:
        assert key_policy(key, profile, clock=clock) == before
    assert len(ctx.captured_queries) == 0
    # A key seen for the first time reads it afresh.
    other = create_agent_key(profile_name="default").key.pk
    assert key_policy(other, profile, clock=clock) == effective_policy(profile)
    # ... and never longer than the age limit.
    clock.now += POLICY_CACHE_SECONDS / 2
    assert key_policy(key, profile, clock=clock).round_soft_limit == before.round_soft_limit + 7


@pytest.mark.django_db
def test_a_policy_changed_in_this_process_applies_at_once() -> None:
    issued = create_agent_key(profile_name="default")
    key, profile = issued.key.pk, issued.key.profile
    clock = Clock()
    before = key_policy(key, profile, clock=clock)
    update_policy(profile=profile, values={"round_soft_limit": before.round_soft_limit + 3})
    assert key_policy(key, profile, clock=clock).round_soft_limit == before.round_soft_limit + 3
    Policy.objects.filter(profile=profile).delete()
    assert key_policy(key, profile, clock=clock) == before


@pytest.mark.django_db
def test_the_remembered_catalogue_expires_and_a_saved_row_applies_at_once() -> None:
    key = create_agent_key(profile_name="default").key.pk
    clock = Clock()
    first = key_catalogue(key, clock=clock)
    row = CatalogueModel.objects.get(model=first[0].model)
    CatalogueModel.objects.filter(pk=row.pk).update(input=row.input + Decimal(1))
    clock.now += CATALOGUE_CACHE_SECONDS / 2
    with CaptureQueriesContext(connection) as ctx:
        assert key_catalogue(key, clock=clock) == first
    assert len(ctx.captured_queries) == 0
    clock.now += CATALOGUE_CACHE_SECONDS / 2
    price = {p.model: p for p in key_catalogue(key, clock=clock)}[row.model]
    assert price.input == row.input + Decimal(1)
    # A save (the admin's path) forgets at once, whatever the clock says.
    row.refresh_from_db()
    row.output = row.output + Decimal(2)
    row.save()
    price = {p.model: p for p in key_catalogue(key, clock=clock)}[row.model]
    assert price.output == row.output


def _soft_limit(port: int, plaintext: str) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/policy",
        headers={"Authorization": f"Bearer {plaintext}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(json.loads(response.read())["round_soft_limit"])


@pytest.mark.django_db(transaction=True)
def test_a_policy_changed_elsewhere_applies_within_a_second_on_every_process(
    tmp_path: Path,
) -> None:
    """Two gunicorn worker processes answer in turn; both remember the policy, then this (third)
    process changes it: within POLICY_CACHE_SECONDS every answer carries the new value."""
    issued = create_agent_key(profile_name="default")
    before = effective_policy(issued.key.profile).round_soft_limit
    env = service_env(
        DATABASE_URL=_database_url_for_worker(), CONSOLE_VAR_DIR=str(settings.VAR_DIR)
    )
    with gunicorn(env, tmp_path / "gunicorn.log", workers=2) as server:
        port = server.port
        # New connections land on either worker: after 30 of them both remember the policy.
        assert {_soft_limit(port, issued.plaintext) for _ in range(30)} == {before}
        update_policy(profile=None, values={"round_soft_limit": before + 5})
        time.sleep(POLICY_CACHE_SECONDS + 0.05)
        answers = {_soft_limit(port, issued.plaintext) for _ in range(30)}
        assert answers == {before + 5}, answers


def test_the_prices_ingest_memoises_go_with_the_remembered_catalogue(make_agent) -> None:
    """A key's submissions share the pricers their catalogue built (`key_prices`), never past the
    catalogue itself: a price saved between two POSTs prices the second call, on the same key and
    in the same second."""
    from telemetry.catalogue import key_prices
    from telemetry.models import LLMCall
    from tests.db.test_ingest import SONNET, record

    agent = make_agent()
    first = agent.post("/api/v1/telemetry", record(session_id="memo", turn=0))
    assert first.status_code == 201, first.content
    assert key_prices(agent.key.pk).pricer(SONNET) is key_prices(agent.key.pk).pricer(SONNET)
    price = key_prices(agent.key.pk).price(SONNET)
    assert price is not None
    row = CatalogueModel.objects.get(model=price.model)
    row.input, row.cache_read = row.input * 2, row.cache_read * 2
    row.output = row.output * 2
    row.cache_write_5m = None if row.cache_write_5m is None else row.cache_write_5m * 2
    row.cache_write_1h = None if row.cache_write_1h is None else row.cache_write_1h * 2
    row.save()
    second = agent.post("/api/v1/telemetry", record(session_id="memo", turn=1))
    assert second.status_code == 201, second.content
    costs = list(LLMCall.objects.filter(session__external_id="memo").order_by("turn"))
    assert [c.turn for c in costs] == [0, 1]
    assert costs[0].cost_usd is not None and costs[1].cost_usd == 2 * costs[0].cost_usd
