"""Every closed set of strings has one list of values: the stored ones are `TextChoices` on the
models, and where a pure module or a service's signature names the same set as a `Literal` (so
mypy checks each use), the two hold the same values."""

from __future__ import annotations

from dataclasses import fields
from typing import get_args

from compaction import services
from compaction.imports.records import Relation
from compaction.models import CompactionOperation, CompactionRun, SessionLink
from context_core.estimates import EstimateMethod
from context_core.operations import (
    AgentCompactionOperation,
    PruneOperation,
    SummarizeOperation,
)
from context_core.relief_planning import Action
from telemetry.models import AgentSession, ContextEvent
from telemetry.otlp.mapping import DraftKind, DraftOrigin
from telemetry.provider_context import EventKind
from telemetry.windows import WindowSource


def test_run_modes_of_the_services_are_the_stored_modes():
    assert set(get_args(services.Mode)) == set(CompactionRun.Mode.values)


def test_planner_actions_are_the_stored_actions():
    assert set(get_args(Action)) == set(CompactionRun.Action.values)


def test_estimate_methods_are_the_stored_methods():
    assert set(get_args(EstimateMethod)) == set(CompactionRun.EstimateMethod.values)


def test_operation_kinds_of_the_core_are_the_stored_kinds():
    kinds = {
        next(f.default for f in fields(op) if f.name == "kind")
        for op in (PruneOperation, SummarizeOperation, AgentCompactionOperation)
    }
    assert kinds == set(CompactionOperation.Kind.values)


def test_import_relations_are_the_stored_relations():
    assert set(get_args(Relation)) - {""} == set(SessionLink.Relation.values)


def test_window_sources_are_the_stored_sources():
    field = AgentSession._meta.get_field("window_source")
    assert {value for value, _ in field.choices or ()} == set(get_args(WindowSource))


def test_the_event_kinds_and_origins_drafted_elsewhere_are_stored_ones():
    kinds = set(get_args(DraftKind)) | set(get_args(EventKind))
    assert kinds <= set(ContextEvent.Kind.values)
    assert set(get_args(DraftOrigin)) <= set(ContextEvent.Origin.values)
