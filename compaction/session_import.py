"""Sessions back in from their export (`compaction.session_export`): the restore path.

One session at a time, each in its own transaction, reading the lines as they come (constant
memory: rows are inserted `BATCH_ROWS` at a time).

* A session that does not exist (an empty database, a deleted session) is created with its
  exported figures, every row of it inserted, and its calls added to the hour rollups
  (`telemetry.rollups.add_calls`): the overview, the session and the costs read what they read
  before. A row that appears twice in the file refuses that session (nothing of it is kept).
* A session that exists keeps its row, its figures and the rollups as they are (they already
  count every call it ever had: retention keeps them); only the rows it lacks are inserted (the
  calls and turns a retention removed, say). Importing the same file twice changes nothing the
  second time.
* The session line's operator tags (format version 2) are added through the one write path
  (`telemetry.session_tags.add_tags`, its rules in `telemetry.tag_rules`), to a new session or
  to the tags an existing one holds: a tag it holds already changes nothing.

Errors name the line (`ExportLineError`); the sessions before it stay imported.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Final

from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.db.backends.base.operations import BaseDatabaseOperations

from compaction.models import CompactionRun, Surface
from compaction.session_export import PART_OF, SESSION_PART, Part, export_columns
from context_core.export_lines import (
    SESSION_TAGS,
    ExportLine,
    ExportLineError,
    check_order,
    decode_line,
)
from telemetry.digests import digest_from_text
from telemetry.errors import FieldError
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall, Turn
from telemetry.profiles import get_or_create_profile
from telemetry.rollups import add_calls
from telemetry.session_state import cover_restored, restore_session
from telemetry.session_tags import add_tags, tags_of
from telemetry.session_totals import totals_from_json
from telemetry.tag_rules import TagError, parse_tags
from telemetry.usage import BUCKETS, INPUT_BUCKETS, MAX_STORED_COUNT, context_size
from telemetry.usage_forms import stored_usage

BATCH_ROWS: Final = 1000


@dataclass
class ImportReport:
    """What an import did: sessions created or found, rows inserted and rows already there."""

    created: int = 0
    existing: int = 0
    inserted: Counter[str] = field(default_factory=Counter)
    present: Counter[str] = field(default_factory=Counter)

    def summary(self) -> str:
        rows = ", ".join(f"{n} {kind}" for kind, n in sorted(self.inserted.items())) or "no rows"
        line = f"{self.created} sessions created, {self.existing} existing; inserted {rows}"
        if self.present:
            line += f"; {sum(self.present.values())} rows were already there"
        return line


def import_lines(lines: Iterable[str]) -> ImportReport:
    """Restore every session in `lines` (JSON lines of an export). Raises ExportLineError at
    the first line it cannot restore; the sessions before that one stay imported."""
    report = ImportReport()
    for _, group in itertools.groupby(_decoded(lines), key=_SessionCounter()):
        with transaction.atomic():
            _restore(group, report)
    return report


def _decoded(lines: Iterable[str]) -> Iterator[ExportLine]:
    previous: str | None = None
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        line = decode_line(text, number)
        check_order(previous, line)
        previous = line.kind
        yield line


class _SessionCounter:
    """groupby's key: a new group at every session line."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, line: ExportLine) -> int:
        if line.kind == SESSION_PART.kind:
            self.count += 1
        return self.count


def _values(part: Part, line: ExportLine) -> dict[str, Any]:
    """The line's values in the types of the part's columns; unknown columns are refused."""
    known = export_columns(part.kind)
    unknown = sorted(set(line.record) - set(known))
    if unknown:
        raise ExportLineError(line.number, f"{unknown[0]}: not a column of a {part.kind} line")
    references = {name for name, _ in part.references}
    values: dict[str, Any] = {}
    for name, value in line.record.items():
        if name in references:
            values[name] = value  # a reference, resolved by the caller
            continue
        column = part.field(name)
        if name in part.digests:  # written in hex (`session_export`), stored as its bytes
            values[name] = _digest(line.number, name, value)
            continue
        try:
            values[name] = (
                value
                if value is None or isinstance(column, models.JSONField)
                else column.to_python(value)
            )
            if value is not None and isinstance(column, models.IntegerField):
                _in_range(column, values[name])
        except ValidationError as exc:
            raise ExportLineError(line.number, f"{name}: {'; '.join(exc.messages)}") from None
    if part.model is LLMCall:
        _check_request_size(line.number, values)
        _store_usage(values)
    return values


def _in_range(column: models.Field[Any, Any], value: int) -> None:
    """`value` fits its integer column (a call's counts are int4) on PostgreSQL, whatever the
    database: SQLite would take any 64-bit integer, so Django's range validators let it by."""
    low, high = BaseDatabaseOperations.integer_field_ranges[column.get_internal_type()]
    if not low <= value <= high:
        raise ValidationError(f"must be in [{low}, {high}], got {value}")


def _check_request_size(number: int, values: dict[str, Any]) -> None:
    """A call's input buckets add up to a size its row stores (`context_tokens`, and the sum
    SQL takes per row: `telemetry.usage.MAX_STORED_COUNT`), as ingest's own calls do."""
    counts = [values.get(name) for name in INPUT_BUCKETS]
    if all(type(n) is int for n in counts):
        size = context_size(SimpleNamespace(**dict(zip(INPUT_BUCKETS, counts, strict=True))))
        if size > MAX_STORED_COUNT:
            raise ExportLineError(
                number,
                f"context_tokens: the input buckets add up to {size}, more than {MAX_STORED_COUNT}",
            )


def _digest(number: int, name: str, value: Any) -> bytes:
    if isinstance(value, str):
        try:
            return digest_from_text(value)
        except ValueError:
            pass
    raise ExportLineError(number, f"{name}: not a SHA-256 in hex (64 hex digits)")


def _store_usage(values: dict[str, Any]) -> None:
    """A call's usage as ingest stores it: nothing where its buckets say all of it."""
    counts = [values.get(name) for name in BUCKETS]
    usage = values.get("raw_usage")
    if isinstance(usage, dict) and all(type(n) is int for n in counts):
        u, r, w5, w1, o = (int(n) for n in counts)  # type: ignore[arg-type]
        values["raw_usage"] = stored_usage(str(values.get("provider")), usage, u, r, w5, w1, o)


def _tags(number: int, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise ExportLineError(number, f"{SESSION_TAGS}: must be an array of tag strings")
    return value


def _restore_tags(
    number: int, session_id: int, created: bool, tags: list[str], report: ImportReport
) -> None:
    """Add the session line's tags through the one write path; count those it held already."""
    held = set() if created else set(tags_of([session_id]).get(session_id, ()))
    try:
        after = add_tags(session_id=session_id, texts=tags)
        named = set(parse_tags(tags))
    except TagError as exc:
        raise ExportLineError(number, f"{SESSION_TAGS}: {exc.message}") from None
    report.inserted["tag"] += len(after) - len(held)
    report.present["tag"] += len(held & named)


@dataclass
class _Target:
    session: AgentSession
    created: bool
    runs: dict[int, int] = field(default_factory=dict)  # exported run id → restored run id


def _restore(lines: Iterator[ExportLine], report: ImportReport) -> None:
    head = next(lines)
    record = dict(head.record)
    tags = _tags(head.number, record.pop(SESSION_TAGS, []))
    values = _values(SESSION_PART, ExportLine(head.number, head.kind, record))
    for name in ("metadata", "metadata_doors"):
        if name in values and not isinstance(values[name], dict):
            raise ExportLineError(head.number, f"{name}: must be an object")
    try:  # what a later re-derivation joins back in (`telemetry.retention`)
        totals_from_json(values.get("retired_totals"))
    except ValueError as exc:
        raise ExportLineError(head.number, f"retired_totals: {exc}") from None
    profile_name = values.pop("profile", None)
    external_id = values.pop("external_id", None)
    if not isinstance(profile_name, str) or not isinstance(external_id, str) or not external_id:
        raise ExportLineError(head.number, "profile, external_id: a session needs both")
    try:
        profile = get_or_create_profile(name=profile_name)
    except FieldError as exc:
        raise ExportLineError(head.number, f"profile: {exc.message}") from None
    session, created = restore_session(profile, external_id, values)
    if tags:
        _restore_tags(head.number, session.pk, created, tags, report)
    target = _Target(session, created)
    if created:
        report.created += 1
    else:
        report.existing += 1
    for kind, same_kind in itertools.groupby(lines, key=lambda line: line.kind):
        part = PART_OF[kind]
        batch: list[ExportLine] = []
        for line in same_kind:
            batch.append(line)
            if len(batch) == BATCH_ROWS:
                _insert(part, batch, target, profile, report)
                batch = []
        if batch:
            _insert(part, batch, target, profile, report)


# The time of a restored row its session's `last_seen_at` must not be earlier than.
_SEEN_AT: Final = {"call": "at", "turn": "last_at"}


def _insert(
    part: Part,
    batch: list[ExportLine],
    target: _Target,
    profile: AgentProfile,
    report: ImportReport,
) -> None:
    session = target.session
    if part.kind == "surface":
        _insert_surface(batch, session, report)
        return
    if part.kind == "run":
        _insert_runs(batch, target, report)
        return
    rows = []
    for line in batch:
        values = _values(part, line)
        if part.kind == "context_event":
            values["call_id"] = _call_id(session, values.pop("call_turn"), values.pop("call_call"))
        elif part.kind == "operation":
            ref = values.pop("run_ref")
            if ref is not None and ref not in target.runs:
                raise ExportLineError(line.number, f"run_ref: no run line with ref {ref}")
            values["run_id"] = None if ref is None else target.runs[ref]
        rows.append(part.model(session=session, **values))
    manager = part.model._default_manager
    if target.created:
        # every row is new: a conflict is a row written twice in the file, which would count
        # twice in the rollups; refuse the session
        try:
            with transaction.atomic():
                manager.bulk_create(rows)
        except IntegrityError:
            first, last = batch[0].number, batch[-1].number
            raise ExportLineError(
                first, f"lines {first}–{last}: a {part.kind} row appears twice"
            ) from None
        report.inserted[part.kind] += len(rows)
        _cover(part, rows, session)
        if part.kind == "call":
            calls: list[LLMCall] = rows  # type: ignore[assignment]
            add_calls(profile.pk, calls)
        return
    before = manager.filter(session=session).count()
    if part.model in (LLMCall, Turn):
        # on PostgreSQL their rows are written through a view (`telemetry.packing`), where
        # `ON CONFLICT DO NOTHING` cannot skip a row: the stored ones are left out first
        manager.bulk_create(_absent(part.model, session, rows))
    else:
        manager.bulk_create(rows, ignore_conflicts=True)
    _cover(part, rows, session)
    added = manager.filter(session=session).count() - before
    report.inserted[part.kind] += added
    report.present[part.kind] += len(rows) - added
    if part.kind == "context_event":
        # removing a call unlinks its events (SET_NULL): the restored call gets them back
        events: list[ContextEvent] = rows  # type: ignore[assignment]
        for event in events:
            if event.call_id is not None:
                ContextEvent.objects.filter(
                    session=session, source_key=event.source_key, call__isnull=True
                ).update(call_id=event.call_id)


def _absent(model: type[models.Model], session: AgentSession, rows: list[Any]) -> list[Any]:
    """The `rows` of `session` that no stored row and no earlier one of `rows` holds a unique
    key of (`ON CONFLICT DO NOTHING`'s choice): a key with a NULL part is held by none."""
    keys = [
        [f for f in c.fields if f != "session"]
        for c in model._meta.constraints
        if isinstance(c, models.UniqueConstraint) and "session" in c.fields
    ]
    by_name = {f.name: f.attname for f in model._meta.concrete_fields}
    attnames = [[by_name[f] for f in fields] for fields in keys]
    held: list[set[tuple[Any, ...]]] = [
        set(model._default_manager.filter(session=session).values_list(*names))
        for names in attnames
    ]
    kept = []
    for row in rows:
        found = [tuple(getattr(row, a) for a in names) for names in attnames]
        if any(None not in key and key in seen for key, seen in zip(found, held, strict=True)):
            continue
        for key, seen in zip(found, held, strict=True):
            seen.add(key)
        kept.append(row)
    return kept


def _cover(part: Part, rows: list[models.Model], session: AgentSession) -> None:
    if part.kind in _SEEN_AT:
        cover_restored(session.pk, max(getattr(row, _SEEN_AT[part.kind]) for row in rows))


def _call_id(session: AgentSession, turn: Any, call: Any) -> int | None:
    if turn is None or call is None:
        return None
    found: int | None = (
        LLMCall.objects.filter(session=session, turn=turn, call=call)
        .values_list("pk", flat=True)
        .first()
    )
    return found


def _insert_surface(batch: list[ExportLine], session: AgentSession, report: ImportReport) -> None:
    part = PART_OF["surface"]
    for line in batch:
        values = _values(part, line)
        if Surface.objects.filter(session=session).exists():
            report.present["surface"] += 1
            continue
        Surface.objects.create(session=session, **values)
        report.inserted["surface"] += 1


def _insert_runs(batch: list[ExportLine], target: _Target, report: ImportReport) -> None:
    """Runs have no natural key but their start: a run of the session that started at the same
    time in the same mode is the same run."""
    part = PART_OF["run"]
    for line in batch:
        values = _values(part, line)
        ref = values.pop("ref")
        started_at = values.pop("started_at", None)
        same = None
        if not target.created and started_at is not None:
            same = (
                CompactionRun.objects.filter(
                    session=target.session, started_at=started_at, mode=values.get("mode")
                )
                .values_list("pk", flat=True)
                .first()
            )
        if same is not None:
            target.runs[ref] = same
            report.present["run"] += 1
            continue
        run = CompactionRun.objects.create(session=target.session, **values)
        if started_at is not None:  # auto_now_add stamped the import's time
            CompactionRun.objects.filter(pk=run.pk).update(started_at=started_at)
        target.runs[ref] = run.pk
        report.inserted["run"] += 1
