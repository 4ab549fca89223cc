"""`telemetry.ingest.values.from_row` builds the same stored instance as `Model.from_db`, without
`Model.__init__`, and leaves rows it cannot take (a partial row, a model someone listens to
the construction of) to `from_db`."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_init

from telemetry.ingest.pipeline import store_records
from telemetry.ingest.values import from_row
from telemetry.models import AgentSession, Turn
from telemetry.profiles import get_or_create_profile

pytestmark = pytest.mark.django_db


def _state(instance: Any) -> dict[str, Any]:
    values = {k: v for k, v in instance.__dict__.items() if k != "_state"}
    return {**values, "adding": instance._state.adding, "db": instance._state.db}


def _row(model: Any, pk: int) -> tuple[list[str], list[Any]]:
    names = [f.attname for f in model._meta.concrete_fields]
    values = list(model.objects.filter(pk=pk).values_list(*names).get())
    return names, values


def test_a_whole_row_is_the_instance_from_db_gives() -> None:
    profile = get_or_create_profile(name="rows")
    record = {
        "session_id": "row-session",
        "turn": 3,
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 1_200, "output_tokens": 80, "cache_read_input_tokens": 900},
    }
    store_records(profile=profile, raw_items=[record], batch=False)
    session = AgentSession.objects.get(external_id="row-session")
    for model, pk in ((AgentSession, session.pk), (Turn, Turn.objects.get(session=session).pk)):
        names, values = _row(model, pk)
        built, expected = (
            from_row(model, names, values),
            model.from_db(connection.alias, names, values),
        )
        assert type(built) is model
        assert _state(built) == _state(expected)
        assert built == expected and built.pk == pk
        assert getattr(built, "profile", None) is None or built.profile.pk == profile.pk
    # a partial row goes to from_db (the fields left out deferred)
    names, values = _row(AgentSession, session.pk)
    partial = from_row(AgentSession, names[:3], values[:3])
    assert partial.get_deferred_fields() and partial.pk == session.pk


def test_a_model_with_construction_listeners_goes_through_init() -> None:
    profile = get_or_create_profile(name="rows")
    session = AgentSession.objects.create(profile=profile, external_id="listened")
    seen: list[Any] = []

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(listener, sender=AgentSession)
    try:
        built = from_row(AgentSession, *_row(AgentSession, session.pk))
    finally:
        post_init.disconnect(listener, sender=AgentSession)
    assert seen == [built]
