"""`copy_rows` sends a datetime every row holds (a batch's `received_at`, its `at` when no record
sent one) as its dumper's text, made once: what is stored is what a dumper per value stores
(odd zones, whole seconds, microseconds), and only a column of one shared object is sent so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection

from telemetry.costing import CALL_COLUMNS, CallRow
from telemetry.ingest.new_rows import _copy_types, _shared_times, copy_rows
from telemetry.models import AgentSession, LLMCall

from .test_copy_rows import _odd_rows, _stored_text, _untyped_copy

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's"),
]

_ZONES = [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=9))]


def _shared_rows(session_pk: int, moment: datetime) -> list[CallRow]:
    """`_odd_rows` with one datetime object as every row's `at` and `received_at`."""
    rows = _odd_rows(session_pk) * 2
    return [
        row._replace(turn=i, request_id=f"r{i}", at=moment, received_at=moment)
        for i, row in enumerate(rows)
    ]


@pytest.mark.parametrize("zone", _ZONES)
@pytest.mark.parametrize("microsecond", [0, 1, 999999])
def test_a_shared_datetime_is_stored_as_a_dumper_per_value_stores_it(make_agent, zone, microsecond):
    agent = make_agent()
    typed, untyped = (
        AgentSession.objects.create(profile=agent.key.profile, external_id=name)
        for name in ("shared-typed", "shared-untyped")
    )
    moment = datetime(2025, 6, 1, 12, 0, 7, microsecond, tzinfo=zone)
    copy_rows(LLMCall, _shared_rows(typed.pk, moment))
    _untyped_copy(_shared_rows(untyped.pk, moment))
    session = CALL_COLUMNS.index("session_id")
    stored, expected = (
        [row[:session] + row[session + 1 :] for row in _stored_text(pk)]
        for pk in (typed.pk, untyped.pk)
    )
    assert len(stored) == 4
    assert stored == expected
    assert set(LLMCall.objects.filter(session=typed).values_list("at", flat=True)) == {moment}


def test_only_columns_of_one_shared_object_are_sent_as_text(make_agent):
    moment = datetime(2025, 6, 1, 12, 0, 7, tzinfo=UTC)
    rows = [row._replace(received_at=moment) for row in _odd_rows(1)]
    # `at`: equal values, distinct objects (never assumed equal: each is dumped)
    rows = [row._replace(at=datetime(2025, 6, 1, tzinfo=UTC)) for row in rows]
    types = _copy_types(LLMCall)[1]
    with connection.cursor() as cursor:
        shared = _shared_times(cursor.cursor, types, rows)
        assert shared == {CALL_COLUMNS.index("received_at"): "2025-06-01 12:00:07+00:00"}
        assert _shared_times(cursor.cursor, types, rows[:1]) == {}
