"""Sessions out as JSON lines (`context_core.export_lines`), streamed in constant memory.

A session's export is its row (figures, metadata and title included) with its operator tags,
its turn keys, calls, turns, context events,
transcript log, surface versions, surface, compaction runs and operations: everything its
figures, its pages and its surface are read from, so `compaction.session_import` can restore a
removed period with the same figures. Archives are not exported (they are copies of the log,
which is); a run's link to its archive is left out.

Rows are read in keyset chunks of `CHUNK_ROWS` along each table's unique key, never all at
once, and written as soon as read: memory stays bounded whatever the size of a session or of a
profile. Each chunk is its own read: export sessions that are settled (before a retention
cut-off), or accept that rows stored meanwhile may or may not be in the file.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Final

from django.db import models
from django.db.models import Exists, FilteredRelation, OuterRef, Q, QuerySet

from compaction.log_retention import archived_texts
from compaction.models import (
    CompactionOperation,
    CompactionRun,
    LogMessage,
    Surface,
    SurfaceVersion,
)
from context_core.export_lines import KINDS, SESSION_TAGS, encode_line
from telemetry.accounting import STORED_COST_PLACES
from telemetry.digests import digest_text
from telemetry.models import AgentSession, ContextEvent, LLMCall, Turn, TurnKey
from telemetry.money import money_text
from telemetry.session_tags import tags_of
from telemetry.usage_forms import usage_as_sent

CHUNK_ROWS: Final = 1000
SESSION_CHUNK: Final = 100


@dataclass(frozen=True)
class Part:
    """How one kind of row is exported: its model, the columns it keeps (export name → ORM
    path), and the columns that order it within a session (unique, an index's columns)."""

    kind: str
    model: type[models.Model]
    order: tuple[str, ...]
    # columns never exported: server clocks of the copy, job state, links re-made on import
    left_out: frozenset[str] = frozenset()
    # references exported by what they point at, not by a database id (name → ORM path)
    references: tuple[tuple[str, str], ...] = ()
    # server clocks (auto_now_add) exported all the same: a restored run keeps its start time
    kept_clocks: frozenset[str] = frozenset()
    # relations to rows of the same session that `references` follow (as `session_<name>`),
    # joined by session as well as by id: a read that names its session
    same_session: tuple[str, ...] = ()
    columns: tuple[tuple[str, str], ...] = field(init=False)
    # the money columns: written as the API writes money (`money_text`)
    money: tuple[str, ...] = field(init=False)
    # the digest columns (stored as raw bytes): written in hex (`digest_text`)
    digests: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        own = tuple(
            (f.attname, f.attname)
            for f in self.model._meta.concrete_fields
            if not f.is_relation
            and f.attname != "id"
            and f.attname not in self.left_out
            and (f.attname in self.kept_clocks or not _is_clock(f))
        )
        object.__setattr__(self, "columns", own + self.references)
        money = []
        for name, _ in own:
            f = self.field(name)
            if isinstance(f, models.DecimalField):
                # every decimal a session holds is money, stored to the nano-dollar
                assert f.decimal_places == STORED_COST_PLACES, f"{self.kind}.{name}"
                money.append(name)
        object.__setattr__(self, "money", tuple(money))
        digests = tuple(n for n, _ in own if isinstance(self.field(n), models.BinaryField))
        object.__setattr__(self, "digests", digests)

    def rows(self, session_id: int) -> QuerySet[Any]:
        """The part's rows of the session, with its `same_session` relations."""
        found: QuerySet[Any] = self.model._default_manager.filter(session_id=session_id)
        joined: dict[str, Any] = {
            f"session_{name}": FilteredRelation(
                name, condition=Q(**{f"{name}__session_id": session_id})
            )
            for name in self.same_session
        }
        return found.annotate(**joined) if joined else found

    def field(self, name: str) -> models.Field[Any, Any]:
        found: models.Field[Any, Any] = self.model._meta.get_field(name)  # type: ignore[assignment]
        return found


def _is_clock(f: Any) -> bool:
    return bool(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False))


SESSION_PART: Final = Part(
    "session",
    AgentSession,
    order=("id",),
    # job state of the source database: a restored session has no relief pending
    left_out=frozenset({"relief_requested_at"}),
    references=(("profile", "profile__name"),),
    kept_clocks=frozenset({"created_at"}),
)
PARTS: Final = (
    Part("turn_key", TurnKey, order=("turn",)),
    Part("call", LLMCall, order=("turn", "call")),
    Part("turn", Turn, order=("turn",)),
    Part(
        "context_event",
        ContextEvent,
        order=("id",),
        references=(("call_turn", "session_call__turn"), ("call_call", "session_call__call")),
        same_session=("call",),
    ),
    # `removed_at`: the text is exported all the same (`_with_text`), so it is not removed there
    Part("log", LogMessage, order=("seq",), left_out=frozenset({"removed_at"})),
    Part("surface_version", SurfaceVersion, order=("version",)),
    Part("surface", Surface, order=("id",)),
    Part(
        "run",
        CompactionRun,
        order=("id",),
        references=(("ref", "id"),),
        kept_clocks=frozenset({"started_at"}),
    ),
    Part("operation", CompactionOperation, order=("id",), references=(("run_ref", "run_id"),)),
)
assert tuple(p.kind for p in (SESSION_PART, *PARTS)) == KINDS
PART_OF: Final = {p.kind: p for p in (SESSION_PART, *PARTS)}


def _after(order: Sequence[str], last: Sequence[Any]) -> Q:
    """Rows after `last` in `order` (a row-value comparison the ORM has no word for). The first
    column's `>=` is what lets the database start the index scan there."""
    later = Q()
    for i in range(len(order) - 1, -1, -1):
        here = Q(**{f"{order[i]}__gt": last[i]})
        later = here if i == len(order) - 1 else here | (Q(**{order[i]: last[i]}) & later)
    return Q(**{f"{order[0]}__gte": last[0]}) & later


def _chunks(part: Part, rows: QuerySet[Any]) -> Iterator[list[tuple[Any, ...]]]:
    """`rows` as value tuples (the part's columns, then its order columns), `CHUNK_ROWS` at a
    time in the part's order."""
    paths = [path for _, path in part.columns]
    width = len(paths)
    ordered = rows.order_by(*part.order)
    last: tuple[Any, ...] | None = None
    while True:
        page = ordered if last is None else ordered.filter(_after(part.order, last))
        chunk = list(page.values_list(*paths, *part.order)[:CHUNK_ROWS])
        if not chunk:
            return
        yield [row[:width] for row in chunk]
        if len(chunk) < CHUNK_ROWS:
            return
        last = chunk[-1][width:]


def _lines(
    part: Part,
    rows: Sequence[tuple[Any, ...]],
    session_id: int = 0,
    extra: Mapping[str, Any] | None = None,
) -> str:
    names = [name for name, _ in part.columns]
    values: Iterator[dict[str, Any]] = (
        dict(zip(names, row, strict=True), **(extra or {})) for row in rows
    )
    if part.model is LLMCall:  # the usage as sent, where its buckets say all of it
        values = (_with_usage(v) for v in values)
    if part.model is LogMessage:
        values = iter(_with_text(session_id, list(values)))
    return "".join(encode_line(part.kind, _money_written(part, v)) for v in values)


def _with_text(session_id: int, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Log lines with the text log retention removed read back from the archive holding it:
    an export holds the whole log (archives are not exported), so its import restores it."""
    removed = [v["seq"] for v in rows if not v["raw"]]
    if removed:
        texts = archived_texts(session_id, removed)
        for v in rows:
            if not v["raw"] and v["seq"] in texts:
                v["raw"] = texts[v["seq"]][1]
    return rows


def _with_usage(values: dict[str, Any]) -> dict[str, Any]:
    if values["raw_usage"] is None:
        values["raw_usage"] = usage_as_sent(None, SimpleNamespace(**values))
    return values


def _money_written(part: Part, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the part's money columns written as the API writes money, and its digests
    in hex (as they were stored before they were stored as bytes)."""
    for name in part.money:
        values[name] = money_text(values[name])
    for name in part.digests:
        values[name] = digest_text(values[name])
    return values


def session_lines(session_ids: Sequence[int]) -> Iterator[str]:
    """The export of the given sessions, in their order: a string of whole lines per chunk."""
    for session_id in session_ids:
        head = list(_chunks(SESSION_PART, AgentSession.objects.filter(pk=session_id)))
        if not head:
            continue  # deleted since it was listed
        tags = list(tags_of([session_id]).get(session_id, ()))
        yield _lines(SESSION_PART, head[0], extra={SESSION_TAGS: tags})
        for part in PARTS:
            for chunk in _chunks(part, part.rows(session_id)):
                yield _lines(part, chunk, session_id)


def sessions_to_export(
    *, profile_id: int | None = None, before: datetime | None = None
) -> QuerySet[AgentSession]:
    """Sessions of `profile_id` (every profile when None) with activity before `before`: opened
    before it, or holding a turn that began before it (every session a retention cut-off at
    `before` would take rows from, exported whole). All sessions when `before` is None."""
    sessions = AgentSession.objects.all()
    if profile_id is not None:
        sessions = sessions.filter(profile_id=profile_id)
    if before is not None:
        older_turn = Turn.objects.filter(session_id=OuterRef("pk"), first_at__lt=before)
        sessions = sessions.filter(Q(created_at__lt=before) | Exists(older_turn))
    return sessions


def export_lines(sessions: QuerySet[AgentSession]) -> Iterator[str]:
    """Every session of `sessions` (by id), listed `SESSION_CHUNK` ids at a time."""
    last = 0
    while True:
        ids = list(
            sessions.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:SESSION_CHUNK]
        )
        if not ids:
            return
        yield from session_lines(ids)
        last = ids[-1]


@functools.cache
def export_columns(kind: str) -> tuple[str, ...]:
    """The column names a line of `kind` holds."""
    return tuple(name for name, _ in PART_OF[kind].columns)
