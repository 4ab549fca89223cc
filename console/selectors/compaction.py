"""Reads of what compaction keeps for a session: its runs and context events, its archives and
their full-text search, the surface now or on a past turn, and an archived transcript parsed.

Messages are returned as `context_core` messages; `console.presenters.transcripts` draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db.models import Min, Q
from django.utils import timezone

from compaction.archives import SearchHit, archive_document, search_archives_counted
from compaction.estimate_checks import with_next_call
from compaction.models import Archive, CompactionRun, Surface
from compaction.relief_state import ReliefState, SessionRelief
from compaction.transcripts import derive, format_of, stored_surface_messages, surface_at
from console.selectors.relief import session_relief
from context_core import (
    Format,
    Message,
    TranscriptError,
    parse_anthropic,
    parse_message,
    parse_openai,
)
from context_core.estimates import estimate_error
from telemetry.models import AgentSession, ContextEvent, LLMCall, Turn

RUNS_SHOWN: Final = 20
ARCHIVES_SHOWN: Final = 20
ARCHIVES_PER_PAGE: Final = 25
SEARCH_HITS: Final = 50


@dataclass(frozen=True)
class RunsTable:
    runs: list[CompactionRun]
    total: int
    # Agent- and provider-side compactions, edits and overflows (not our runs), newest first.
    events: list[ContextEvent] = field(default_factory=list)
    events_total: int = 0
    # where the session's automatic relief stands, and when the sweeper tries a failing one again
    relief: SessionRelief = SessionRelief(ReliefState.NONE)
    relief_retry_in: float | None = None
    relief_cap: int = 0  # RELIEF_RETRY_MAX_ATTEMPTS
    sweep_seconds: int = 0  # COMPACTION_SWEEP_INTERVAL_SECONDS


def compaction_runs(session: AgentSession) -> RunsTable:
    """The session's latest compaction runs and its agent-/provider-side context events, newest
    first, how many of each there are, and where its automatic relief stands: four queries, one
    for the turns after agent compactions, three for the relief state."""
    runs = CompactionRun.objects.filter(session=session).order_by("-started_at", "-pk")
    events = ContextEvent.objects.filter(session=session).order_by("-at", "-pk")
    shown = list(with_next_call(runs)[:RUNS_SHOWN])
    for run in shown:
        # D6: the estimate beside what the next call really measured.
        run.estimate_error = (  # type: ignore[attr-defined]
            estimate_error(run.estimate_tokens, run.next_context_tokens)  # type: ignore[attr-defined]
            if run.estimate_tokens is not None and run.next_context_tokens is not None  # type: ignore[attr-defined]
            else None
        )
    listed = list(events[:RUNS_SHOWN])
    _mark_turn_after(session, listed)
    relief = session_relief(session)
    return RunsTable(
        shown,
        runs.count(),
        listed,
        events.count(),
        relief,
        relief.retry_in_seconds(timezone.now()),
        int(settings.RELIEF_RETRY_MAX_ATTEMPTS),
        int(settings.COMPACTION_SWEEP_INTERVAL_SECONDS),
    )


def _mark_turn_after(session: AgentSession, events: list[ContextEvent]) -> None:
    """Each agent compaction that names the surface version it produced gets `turn_after`: the
    first turn whose request carried that surface (what the agent sent after it), else None.
    One query for all of them."""
    versions = {
        event.pk: version
        for event in events
        if isinstance(event.detail, dict)
        and isinstance(version := event.detail.get("surface_version"), int)
    }
    first_turns: list[tuple[int, int]] = []
    if versions:
        first_turns = [
            (seen, first)
            for seen, first in LLMCall.objects.filter(
                session=session, surface_version__gte=min(versions.values())
            )
            .values("surface_version")
            .annotate(first=Min("turn"))
            .values_list("surface_version", "first")
            if seen is not None and first is not None
        ]
    for event in events:
        version = versions.get(event.pk)
        turns = [turn for seen, turn in first_turns if version is not None and seen >= version]
        event.turn_after = min(turns) if turns else None  # type: ignore[attr-defined]


# A history entry's place: when it started (ours) or happened (theirs), ours before theirs at
# the same instant, then the row's id. What a compaction-history cursor holds.
HistoryKey = tuple[datetime, int, int]
_OURS: Final = 0
_THEIRS: Final = 1


def _later(field: str, rank: int, after: HistoryKey) -> Q:
    at, after_rank, pk = after
    if rank > after_rank:
        return Q(**{f"{field}__gte": at})
    if rank < after_rank:
        return Q(**{f"{field}__gt": at})
    return Q(**{f"{field}__gt": at}) | Q(**{field: at, "pk__gt": pk})


def compaction_history(
    session: AgentSession, *, after: HistoryKey | None, limit: int
) -> list[tuple[HistoryKey, CompactionRun | ContextEvent]]:
    """The session's compaction history, oldest first: our runs (every outcome) and the agent's
    and provider's context events in one order (`HistoryKey`), up to `limit` + 1 entries after
    `after` (one more tells there is a next page). Two queries, whatever the history's length.
    """
    runs = CompactionRun.objects.filter(session=session)
    events = ContextEvent.objects.filter(session=session)
    if after is not None:
        runs = runs.filter(_later("started_at", _OURS, after))
        events = events.filter(_later("at", _THEIRS, after))
    entries: list[tuple[HistoryKey, CompactionRun | ContextEvent]] = [
        ((run.started_at, _OURS, run.pk), run)
        for run in runs.order_by("started_at", "pk")[: limit + 1]
    ]
    entries += [
        ((event.at, _THEIRS, event.pk), event) for event in events.order_by("at", "pk")[: limit + 1]
    ]
    entries.sort(key=lambda entry: entry[0])
    return entries[: limit + 1]


def session_archives(session: AgentSession) -> list[Archive]:
    """The session's latest archives, newest first. One query."""
    return list(
        Archive.objects.filter(session=session).order_by("-created_at", "-pk")[:ARCHIVES_SHOWN]
    )


def latest_archive(session: AgentSession) -> Archive | None:
    """The newest archive of `session`: it holds the whole originals of the pruned stubs."""
    return Archive.objects.filter(session=session).order_by("-created_at", "-pk").first()


# --- surfaces ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SurfaceRead:
    """A surface as read: `turn` None is the surface now; `missing` says why there is none."""

    messages: Sequence[Message] = ()
    version: int | None = None
    turn: int | None = None
    tokens: int = 0
    chars: int = 0
    missing: str = ""


def surface_now(session: AgentSession) -> SurfaceRead:
    """The surface as the model sees it now: the stored one (D1: the materialised
    `derive_surface(log, operations)`), read back without touching the log; derived only for a
    row stored before its seqs were."""
    if session.surface_version == 0:
        return SurfaceRead(missing="no transcript has been appended to this session yet")
    state = Surface.objects.filter(session=session).first()
    messages = stored_surface_messages(state) if state is not None else None
    if state is not None and messages is not None:
        return SurfaceRead(
            messages, version=state.version, tokens=state.tokens_estimate, chars=state.chars
        )
    _, _, surface = derive(session)
    return SurfaceRead(
        surface.messages,
        version=session.surface_version,
        tokens=surface.tokens,
        chars=surface.chars,
    )


def surface_on_turn(session: AgentSession, turn: int) -> SurfaceRead:
    """The surface the model saw on `turn`: the version its last call's request used, rebuilt
    exactly (`surface_at`)."""
    version = (
        Turn.objects.filter(session=session, turn=turn)
        .values_list("surface_version", flat=True)
        .first()
    )
    if version is None:
        exists = Turn.objects.filter(session=session, turn=turn).exists()
        why = "its calls did not name a surface version" if exists else "there is no such turn"
        return SurfaceRead(turn=turn, missing=f"Turn {turn}: {why}.")
    surface = surface_at(session, version)
    if surface is None:
        return SurfaceRead(
            turn=turn,
            version=version,
            missing=f"Surface version {version} cannot be rebuilt: it is not recorded, or a "
            "message it showed lost its text to retention and no archive holds it.",
        )
    return SurfaceRead(
        surface.messages,
        version=version,
        turn=turn,
        tokens=surface.tokens,
        chars=surface.chars,
    )


# --- archives ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoundHits:
    """A page of archive search hits, each with the session that owns its archive (if any)."""

    hits: list[tuple[SearchHit, AgentSession | None]]
    number: int
    has_more: bool
    total: int = 0


def archive_hits(query: str, session: AgentSession | None = None, page: int = 1) -> FoundHits:
    """A page of full-text hits across every profile's archives (or one session's), best match
    first, with the total count. Three queries."""
    page = max(page, 1)
    counted = search_archives_counted(
        query, session=session, limit=SEARCH_HITS + 1, offset=(page - 1) * SEARCH_HITS
    )
    found = counted.hits
    hits = found[:SEARCH_HITS]
    owners = dict(
        Archive.objects.filter(pk__in={h.archive_id for h in hits}).values_list("pk", "session_id")
    )
    sessions = {
        s.pk: s
        for s in AgentSession.objects.filter(pk__in=set(owners.values())).select_related("profile")
    }
    paired = [(hit, sessions.get(owners.get(hit.archive_id, -1))) for hit in hits]
    return FoundHits(paired, page, len(found) > SEARCH_HITS, counted.total)


def archives_page(number: str | None, session: AgentSession | None = None) -> Page[Archive]:
    """Every archive (or one session's), newest first. Two queries."""
    archives = Archive.objects.select_related("session__profile").order_by("-created_at", "-pk")
    if session is not None:
        archives = archives.filter(session=session)
    return Paginator(archives, ARCHIVES_PER_PAGE, allow_empty_first_page=True).get_page(number)


@dataclass(frozen=True)
class ArchivedTranscript:
    """An archive's document with its log and surface parsed; `problem` when they do not parse
    (the document is still there: the downloads keep every byte)."""

    archive: Archive
    document: dict[str, Any]
    log: list[Message]
    surface: list[Message]
    problem: str = ""


def _parse_archived(fmt: Format, document: dict[str, Any]) -> tuple[list[Message], list[Message]]:
    log = [
        parse_message(
            {k: v for k, v in entry.items() if k != "seq"},
            format=fmt,
            seq=int(entry.get("seq", index)),
            index=index,
        )
        for index, entry in enumerate(document["log"])
    ]
    surface_doc = document["surface"]
    if fmt == "anthropic":
        surface = parse_anthropic(surface_doc["messages"], system=surface_doc.get("system"))
    else:
        surface = parse_openai(surface_doc["messages"])
    return log, surface


def archived_transcript(archive: Archive) -> ArchivedTranscript:
    """The archive's log and the surface as it was, parsed."""
    document = archive_document(archive)
    try:
        log, surface = _parse_archived(format_of(archive.format), document)
    except (TranscriptError, KeyError, TypeError, ValueError) as exc:
        return ArchivedTranscript(archive, document, [], [], problem=str(exc))
    return ArchivedTranscript(archive, document, log, surface)
