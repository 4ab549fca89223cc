"""Import a transcript file into a profile: the thin Django side of issue 11.

`import_file` reads a file from where its last import stopped (`TranscriptImport`), feeds the
pure parser, and stores what it produces in chunks, one transaction each with the new import
state, so a crash or Ctrl-C never leaves a line half-imported nor imports one twice:

* messages through `compaction.transcripts.append_messages` (idempotent on `seq`);
* calls through telemetry ingest, each naming the surface version its request used;
* the agent's compactions as an `AgentCompactionOperation` on the log (the surface of the turns
  after it is what the agent sent) and a `ContextEvent` (origin "agent") in the session history;
* child sessions (subagents, sidechains, the compaction's own call) linked to their parent.

A file whose already-imported prefix changed (rewritten, replaced) is reported and left alone.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, Literal

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from compaction.imports.files import Format, NotATranscript, detect_format, make_parser
from compaction.imports.reader import as_line, complete_json, prefix_digest, read_frames
from compaction.imports.records import (
    CallSeen,
    CompactionSeen,
    LogAppend,
    Note,
    Record,
    SessionMeta,
    SessionSeen,
    Skipped,
    TokensAfter,
)
from compaction.log_cache import HeldLogs
from compaction.models import (
    CompactionOperation,
    SessionLink,
    Surface,
    SurfaceVersion,
    TranscriptImport,
)
from compaction.rawjson import Span
from compaction.transcripts import (
    agent_cut,
    append_messages,
    load_log,
    load_operations,
    store_surface,
)
from context_core import AgentCompactionOperation, derive_surface
from context_core.line_framing import (
    DEFAULT_MAX_LINE_BYTES,
    Frame,
    FramerState,
    LineFramer,
    Overlong,
)
from telemetry.errors import FieldError
from telemetry.events import record_context_event
from telemetry.ingest.pipeline import ingest_records
from telemetry.models import AgentKey, AgentProfile, AgentSession, ContextEvent
from telemetry.session_state import (
    get_or_create_session,
    hold_relief,
    lock_session,
    record_metadata,
    release_relief,
)

CHUNK_LINES = 5000
CHUNK_BYTES = 16 << 20
CALL_BATCH = 1000
_FORMAT_OF = {"claude-code": "anthropic", "codex": "openai"}


# What an import of one file came to; mypy checks every comparison against this closed set.
ImportStatus = Literal["imported", "unchanged", "rewritten", "refused", "empty", "failed"]


@dataclass
class FileReport:
    """What one import of one file did (the command and the API print this)."""

    path: str
    format: str = ""
    status: ImportStatus = "imported"
    detail: str = ""
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    calls: int = 0
    duplicates: int = 0
    compactions: int = 0
    lines: int = 0
    bytes: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)
    more: bool = False  # stopped at its budget with bytes left to read (not in `as_dict`)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "status": self.status,
            "detail": self.detail,
            "sessions": self.sessions,
            "messages": self.messages,
            "calls": self.calls,
            "duplicate_calls": self.duplicates,
            "compactions": self.compactions,
            "lines": self.lines,
            "bytes": self.bytes,
            "skipped": [{"line": line, "reason": reason} for line, reason in self.skipped],
            "notes": [{"line": line, "text": text} for line, text in self.notes],
        }


def import_file(
    *,
    profile: AgentProfile,
    path: str,
    handle: BinaryIO,
    fmt: Format | None = None,
    final: bool = True,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    budget: int | None = None,
) -> FileReport:
    """Import what is new in `handle` (the file at `path`, read in binary).

    `final`: the file is not being written, so a response still open at its end is complete and
    a last line without its newline is the file's last line (a plain import); `--follow` passes
    False until the file has been quiet for a while, and such a line waits for its newline.
    Reads up to the file's size when called (a file that keeps growing is read on the next
    call), at most `budget` bytes when given (`report.more` then says there is more), and
    refuses a line longer than `max_line_bytes` by its number, without holding it.
    Raises NotATranscript for another format (nothing stored).
    """
    report = FileReport(path=path)
    state = TranscriptImport.objects.filter(profile=profile, path=path).first()
    size = handle.seek(0, 2)
    changed = state is not None and (
        state.offset > size
        or (
            state.offset > 0
            and prefix_digest(handle, state.offset) != (state.head_hash, state.tail_hash)
        )
    )
    if state is not None and changed:
        if first_line_digest(handle) == state.totals.get("first_line"):
            # Same beginning, different imported bytes: rewritten in place. Importing it
            # again would count its calls twice; say so and leave it.
            TranscriptImport.objects.filter(pk=state.pk).update(rewritten_at=timezone.now())
            report.format = state.format
            report.status = "rewritten"
            report.detail = (
                f"the first {state.offset} bytes changed since they were imported "
                "(file rewritten); nothing imported again"
            )
            return report
        # Another file at the same path (rotated): import it from its start.
        report.notes.append((0, "a new file replaced the one imported at this path (rotated)"))
        state.offset, state.next_line, state.parser_state = 0, 1, {}
        state.totals = {}
        state.session = None
        state.save()
    detected = detect_format(handle, max_line_bytes=max_line_bytes, end=size)
    if detected is None:
        report.status = "empty"
        return report
    if fmt is not None and fmt != detected:
        raise NotATranscript(f"the file is a {detected} transcript, not {fmt}")
    report.format = detected
    if state is None:
        state, _ = TranscriptImport.objects.get_or_create(
            profile=profile, path=path, defaults={"format": detected}
        )
    if not state.totals.get("first_line"):
        state.totals = {**state.totals, "first_line": first_line_digest(handle)}
    report.sessions = list(state.totals.get("sessions", []))
    parser = make_parser(detected, path, state.parser_state or None)
    # A file is read from its first line on: until it passes the agent's compactions its calls
    # saw none, whatever another file of the same session stored (a copy at another path).
    passed = state.totals.get("operations") if state.offset > 0 else {}
    sink = _Sink(profile, report, final=final, passed=passed)
    framer = LineFramer(
        max_bytes=max_line_bytes,
        state=FramerState(
            state.offset,
            state.next_line,
            discarding=bool(state.totals.get("discarding")),
            open_tail=bool(state.totals.get("open_tail")),
        ),
    )
    chunk: list[Record] = []
    lines, chunk_bytes = 0, 0
    for frame in read_frames(handle, framer, end=size, budget=budget):
        if isinstance(frame, Overlong):
            report.skipped.append(
                (
                    frame.number,
                    f"longer than {max_line_bytes} bytes: refused, not read into memory",
                )
            )
            continue
        chunk.extend(parser.feed(frame.number, as_line(frame).text))
        report.lines += 1
        report.bytes += frame.end - frame.start
        chunk_bytes += frame.end - frame.start
        lines += 1
        if lines >= CHUNK_LINES or chunk_bytes >= CHUNK_BYTES:
            if not _commit(sink, state, handle, chunk, parser.state(), framer_at(frame)):
                return report
            chunk, lines, chunk_bytes = [], 0, 0
    report.more = framer.read_to < size
    tail = framer.tail() if not report.more else None
    if tail is not None and tail.data.strip():
        line = as_line(tail)
        if final and complete_json(line.text):
            framer.take_tail()
            chunk.extend(parser.feed(line.number, line.text))
            report.lines += 1
            report.bytes += tail.end - tail.start
        elif final:
            report.skipped.append(
                (
                    tail.number,
                    f"truncated last line ({tail.end - tail.start} bytes without a newline, not "
                    "complete JSON): read again when the file grows",
                )
            )
        else:
            report.skipped.append(
                (
                    tail.number,
                    f"truncated last line ({tail.end - tail.start} bytes without a newline): "
                    "imported once complete or when the file stops growing",
                )
            )
    chunk.extend(parser.flush(final=final and not report.more, number=framer.number))
    if not _commit(sink, state, handle, chunk, parser.state(), framer.state()):
        return report
    if report.lines == 0 and not chunk:
        report.status = "unchanged"
    return report


def framer_at(frame: Frame) -> FramerState:
    """Where the framer stands right after the complete line `frame`."""
    return FramerState(frame.end, frame.number + 1)


def _commit(
    sink: _Sink,
    state: TranscriptImport,
    handle: BinaryIO,
    records: list[Record],
    parser_state: dict[str, Any],
    at: FramerState,
) -> bool:
    """Store one chunk and the import state after it, atomically. False when the log refused a
    message (the chunk is rolled back and the file reported failed at that point)."""
    head, tail = prefix_digest(handle, at.position)
    try:
        with transaction.atomic():
            sink.apply(records)
            sink.finish()
            state.offset = at.position
            state.next_line = at.number
            state.head_hash, state.tail_hash = head, tail
            state.parser_state = json.loads(json.dumps(parser_state))
            if state.session_id is None and sink.first_session is not None:
                state.session = sink.first_session
            state.totals = {
                **state.totals,
                "sessions": sink.report.sessions,
                "operations": sink.ops,
                "discarding": at.discarding,
                "open_tail": at.open_tail,
            }
            state.save()
    except FieldError as exc:
        sink.report.status = "failed"
        sink.report.detail = f"stopped before line {state.next_line}: {exc}"
        return False
    return True


def first_line_digest(handle: BinaryIO) -> str:
    """SHA-256 of the first line, read no further than the longest line an import accepts."""
    handle.seek(0)
    return hashlib.sha256(handle.readline(DEFAULT_MAX_LINE_BYTES + 1)).hexdigest()


def _at(value: str | None) -> datetime:
    parsed = parse_datetime(value) if value else None
    if parsed is None:
        return timezone.now()
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class _Sink:
    """Stores records in order, batching log appends per session between compactions."""

    def __init__(
        self,
        profile: AgentProfile,
        report: FileReport,
        *,
        final: bool,
        passed: dict[str, int] | None,
    ) -> None:
        """`passed`: the operations each session had when this file's import stopped last
        (None: an import that did not record them, which counts the session's stored ones)."""
        self.profile = profile
        self.passed = passed
        self.report = report
        self.sessions: dict[str, AgentSession] = {}
        self.first_session: AgentSession | None = None
        self.messages: dict[str, list[LogAppend]] = defaultdict(list)
        self.calls: list[tuple[CallSeen, int]] = []  # with the session's operation count then
        # The operations in effect per session at the file's current line: the surface
        # version a call names is the one with its log length and these operations.
        self.ops: dict[str, int] = {}
        self.touched: set[int] = set()
        self.key = AgentKey(profile=profile)  # unsaved: ingest reads only its profile
        # The import's own parse of its sessions' logs across chunks: appending must not
        # re-read a log that outgrew the process cache (see HeldLogs). Lives as long as this
        # import_file call, which ends at the first chunk that rolls back.
        self.logs = HeldLogs()

    # -- sessions -----------------------------------------------------------------------------

    def session(self, name: str) -> AgentSession:
        found = self.sessions.get(name)
        if found is None:
            found = get_or_create_session(self.profile, _external_id(name))
            self.sessions[name] = found
            if self.passed is not None:
                self.ops[name] = self.passed.get(name, 0)
            else:
                self.ops[name] = CompactionOperation.objects.filter(session=found).count()
        return found

    def _seen(self, record: SessionSeen) -> None:
        session = self.session(record.session)
        if self.first_session is None:
            self.first_session = session
        if record.session not in self.report.sessions:
            self.report.sessions.append(record.session)
        if record.parent:
            parent = self.session(record.parent)
            SessionLink.objects.get_or_create(
                child=session,
                defaults={
                    "parent": parent,
                    "relation": record.relation or "subagent",
                    "agent_id": record.agent_id,
                },
            )

    # -- records ------------------------------------------------------------------------------

    def apply(self, records: list[Record]) -> None:
        for record in records:
            if isinstance(record, SessionSeen):
                self._seen(record)
            elif isinstance(record, SessionMeta):
                session = self.session(record.session)
                record_metadata({session.pk: session}, {session.pk: record.metadata}, "import")
            elif isinstance(record, LogAppend):
                self.messages[record.session].append(record)
            elif isinstance(record, CallSeen):
                self.calls.append((record, self.ops.get(record.session, 0)))
            elif isinstance(record, CompactionSeen):
                self._flush_messages(record.session)
                self._compaction(record)
            elif isinstance(record, TokensAfter):
                ContextEvent.objects.filter(
                    session=self.session(record.session), source_key=record.source_key
                ).update(tokens_after=record.tokens_after)
            elif isinstance(record, Skipped):
                self.report.skipped.append((record.line, record.reason))
            elif isinstance(record, Note):
                self.report.notes.append((record.line, record.text))

    def finish(self) -> None:
        for name in list(self.messages):
            self._flush_messages(name)
        self._store_calls()
        self._no_relief()

    def _flush_messages(self, name: str) -> None:
        pending = self.messages.pop(name, [])
        if not pending:
            return
        session = self.session(name)
        fmt = pending[0].format
        state = Surface.objects.filter(session=session).first()
        held = state.log_messages if state is not None else 0
        last = pending[-1].seq + 1
        # Requests that ended inside this batch get surface versions of their own, before the
        # append's (D1/D6: "what did the model see on turn N" stays answerable).
        checkpoints = sorted(
            {
                call.log_messages
                for call, ops in self.calls
                if call.session == name
                and ops == self.ops[name]
                and held < call.log_messages < last
            }
        )
        # Messages the log already holds are sent too: the same content is a duplicate, a
        # different one at a taken seq a conflict the report names (the file stops there).
        result = append_messages(
            session=session,
            fmt=fmt,
            system=None,
            messages=[
                Span({**r.message, "seq": r.seq}, json.dumps({**r.message, "seq": r.seq}))
                for r in pending
            ],
            held=self.logs,
            checkpoints=checkpoints,
        )
        self.report.messages += len(result.created)
        self.touched.add(session.pk)

    def _compaction(self, record: CompactionSeen) -> None:
        session = self.session(record.session)
        operation = AgentCompactionOperation(
            keep_from_seq=record.keep_from_seq,
            source=record.source,
            source_key=record.source_key,
            trigger=record.trigger,
            summary=record.summary,
        )
        known = CompactionOperation.objects.filter(
            session=session, kind=CompactionOperation.Kind.AGENT, data__source_key=record.source_key
        ).exists()
        surface = Surface.objects.filter(session=session).first()
        if known:
            # stored by an earlier import of this content (this path or another): passed again
            self.ops[record.session] = self.ops.get(record.session, 0) + 1
        elif surface is not None:
            with transaction.atomic():
                lock_session(session.pk)
                surface.refresh_from_db()
                CompactionOperation.objects.create(
                    session=session,
                    run=None,
                    base_version=surface.version,
                    position=0,
                    kind=CompactionOperation.Kind.AGENT,
                    data=operation.to_dict(),
                )
                operations = load_operations(session)
                log = load_log(session, from_seq=agent_cut(operations), cache=self.logs)
                store_surface(
                    session,
                    surface.format,
                    derive_surface(log, operations),
                    bump=True,
                    log_messages=surface.log_messages,
                )
            self.ops[record.session] = self.ops.get(record.session, 0) + 1
        _, created = record_context_event(
            session,
            kind=ContextEvent.Kind.COMPACTION,
            origin=ContextEvent.Origin.AGENT,
            source=record.source,
            source_key=record.source_key,
            at=_at(record.at),
            trigger=record.trigger,
            turn=record.turn,
            tokens_before=record.tokens_before,
            summary=record.summary,
            detail={
                **record.detail,
                "line": record.line,
                "keep_from_seq": record.keep_from_seq,
                "surface_version": Surface.objects.filter(session=session)
                .values_list("version", flat=True)
                .first(),
            },
        )
        if created:
            self.report.compactions += 1

    def _versions(self, calls: list[tuple[CallSeen, int]]) -> dict[tuple[str, int, int], int]:
        """The latest surface version per (session, log length, operations) the calls name, in
        one query per session."""
        wanted: dict[str, set[int]] = defaultdict(set)
        for call, _ in calls:
            wanted[call.session].add(call.log_messages)
        found: dict[tuple[str, int, int], int] = {}
        for name, counts in wanted.items():
            rows = SurfaceVersion.objects.filter(
                session=self.session(name), log_messages__in=counts
            ).values_list("log_messages", "operations", "version")
            for count, operations, version in rows:
                key = (name, count, operations)
                found[key] = max(version, found.get(key, version))
        return found

    def _store_calls(self) -> None:
        calls, self.calls = self.calls, []
        items: list[dict[str, Any]] = []
        lines: list[int] = []
        versions = self._versions(calls)
        for call, ops in calls:
            session = self.session(call.session)
            item: dict[str, Any] = {
                "session_id": session.external_id,
                "turn": call.turn,
                "call": call.call,
                "model": call.model[:200],
                "provider": call.provider,
                "usage": call.usage,
                # the agent whose transcript this is: its untiered cache writes are billed at
                # the tier it writes with (`telemetry.usage.untiered_write_tier`)
                "agent": self.report.format or None,
            }
            if call.request_id:
                item["request_id"] = call.request_id[:200]
            if call.at:
                item["at"] = call.at
            if call.window_tokens:
                item["window_tokens"] = call.window_tokens
            if call.diagnostics is not None:
                item["diagnostics"] = call.diagnostics
            version = versions.get((call.session, call.log_messages, ops))
            if version is not None:
                item["surface_version"] = version
            items.append(item)
            lines.append(call.line)
            self.touched.add(session.pk)
        for start in range(0, len(items), CALL_BATCH):
            result = ingest_records(
                key=self.key, raw_items=items[start : start + CALL_BATCH], batch=True
            )
            for outcome in result.items:
                line = lines[start + outcome.index]
                if outcome.status == "created":
                    self.report.calls += 1
                elif outcome.status == "duplicate":
                    self.report.duplicates += 1
                else:
                    self.report.skipped.append(
                        (line, f"call not stored ({outcome.status}): {outcome.detail}")
                    )

    def _no_relief(self) -> None:
        """An imported session is not served to its agent: our automatic relief would compact a
        surface nobody reads. The claim below makes the relief requests of this transaction's
        appends claim nothing, and marks the version tried for the sweeper; released after."""
        if not self.touched:
            return
        ids = list(self.touched)
        hold_relief(ids)
        transaction.on_commit(lambda: release_relief(ids))


def _external_id(name: str) -> str:
    """Session ids are one URL path segment of at most 200 characters."""
    return name.replace("/", ":")[:200]
