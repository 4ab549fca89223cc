"""Calls, turns and turn keys name their session without a database constraint
(`LLMCall.session`): the ORM's delete of a session still takes its calls, turns and turn keys
with it (single and batched ingest), and leaves other sessions' alone."""

from __future__ import annotations

from typing import Any

import pytest

from telemetry.ingest.pipeline import store_records
from telemetry.models import AgentSession, LLMCall, Turn, TurnKey
from telemetry.profiles import get_or_create_profile

pytestmark = pytest.mark.django_db


def _record(session_id: str, turn: int, call: int = 0) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn": turn,
        "call": call,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1_000 + turn, "output_tokens": 50},
    }


@pytest.mark.parametrize("batch", [False, True])
def test_deleting_a_session_deletes_its_calls_and_turns(batch: bool) -> None:
    profile = get_or_create_profile(name="children")
    records = [_record("gone", t, c) for t in range(3) for c in range(2)]
    records.append(_record("kept", 0))
    if batch:
        result = store_records(profile=profile, raw_items=records)
        assert {item.status for item in result.items} == {"created"}
    else:
        for record in records:
            assert store_records(profile=profile, raw_items=[record], batch=False).items[
                0
            ].status == ("created")
    gone = AgentSession.objects.get(external_id="gone")
    kept = AgentSession.objects.get(external_id="kept")
    assert LLMCall.objects.filter(session=gone).count() == 6
    assert Turn.objects.filter(session=gone).count() == 3

    gone_pk = gone.pk  # `delete` sets it to None
    gone.delete()

    assert not LLMCall.objects.filter(session_id=gone_pk).exists()
    assert not Turn.objects.filter(session_id=gone_pk).exists()
    assert LLMCall.objects.filter(session=kept).count() == 1
    assert Turn.objects.filter(session=kept).count() == 1


def test_deleting_a_session_deletes_its_turn_keys() -> None:
    profile = get_or_create_profile(name="children-keys")
    gone, kept = (AgentSession.objects.create(profile=profile, external_id=n) for n in "gk")
    TurnKey.objects.bulk_create(
        [TurnKey(session=gone, key=f"trace:{t}", turn=t) for t in range(3)]
        + [TurnKey(session=kept, key="trace:0", turn=0)]
    )

    gone_pk = gone.pk  # `delete` sets it to None
    gone.delete()

    assert not TurnKey.objects.filter(session_id=gone_pk).exists()
    assert list(TurnKey.objects.filter(session=kept).values_list("key", flat=True)) == ["trace:0"]
