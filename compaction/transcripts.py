"""The transcript log and its materialised surface: append, load, derive, serve.

`append_messages` is the one write path of the log. The surface is re-derived from scratch with
`context_core.derive_surface` after every change, so the stored surface always equals the
derivation from the log and the operations (D1): there is no incremental state to drift.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from django.db import transaction
from django.db.models import Max, Q

from compaction.log_cache import LOG_CACHE, HeldLogs, LogCache, ParsedLog, cache_key
from compaction.log_retention import archived_texts
from compaction.models import CompactionOperation, LogMessage, Surface, SurfaceVersion
from compaction.rawjson import Span
from compaction.token_rates import session_token_rates
from context_core import (
    LOG_HASH_START,
    AgentCompactionOperation,
    BoundSpec,
    Format,
    Message,
    Operation,
    TranscriptError,
    canonical_json,
    derive_surface,
    derive_surface_at,
    hidden_seqs,
    is_removed,
    log_hash,
    operation_from_dict,
    parse_anthropic,
    parse_message,
    parse_openai,
    removed_message,
)
from context_core import Surface as CoreSurface
from context_core.estimates import (
    KindChars,
    appended_after_reply,
    kind_chars,
    message_kind_chars,
)
from telemetry.errors import FieldError
from telemetry.idempotency import canonical_hash
from telemetry.models import AgentSession
from telemetry.policy_store import effective_policy
from telemetry.relief_dispatch import request_relief
from telemetry.session_state import lock_session, refresh_projection, set_surface_version

FORMATS = ("anthropic", "openai")


@dataclass
class AppendResult:
    created: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    surface: Surface | None = None


def format_of(value: str) -> Format:
    """A stored format name as the core's type."""
    return "openai" if value == "openai" else "anthropic"


def content_hash(value: Any) -> str:
    """A log message's identity for idempotent appends (the one canonical hash of telemetry)."""
    return canonical_hash(value)


def _without_seq(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "seq"}


def _parse_rows(rows: Sequence[tuple[int, str, str, int | None, str, str]]) -> list[Message]:
    """Stored rows as core messages; a message whose text log retention removed ("") is its
    stand-in (`removed_message`), which the surface never shows."""
    return [
        parse_message(
            _without_seq(json.loads(raw)),
            format=format_of(fmt),
            seq=seq,
            bound=BoundSpec(cap) if cap is not None else None,
        )
        if raw
        else removed_message(seq=seq, role=role, format=format_of(fmt))
        for seq, fmt, raw, cap, _, role in rows
    ]


def load_log(
    session: AgentSession,
    *,
    use_cache: bool = True,
    from_seq: int = 0,
    cache: LogCache | None = None,
) -> list[Message]:
    """The session's log as core messages, rehydrated from the stored original text.

    Parses only what this process has not parsed before (see `LogCache`), unless `use_cache`
    is False (a from-scratch check); `cache` is a caller's own (`HeldLogs`) instead of the
    process's. `from_seq` > 0 loads only the messages from that seq on and the system prompts
    before it: all the surface can show after an agent compaction that cut there (`agent_cut`),
    so a long imported session is appended to in bounded memory.
    """
    columns = ("seq", "format", "raw", "bound_cap", "raw_hash", "role")
    key = cache_key(session, from_seq)
    store = LOG_CACHE if cache is None else cache
    rows_of = LogMessage.objects.filter(session=session)
    if from_seq:
        rows_of = rows_of.filter(Q(seq__gte=from_seq) | Q(role="system"))
    cached = store.get(key) if use_cache else None
    messages: list[Message] = []
    if cached is not None and cached.messages:
        start = cached.messages[-1].seq
        rows = list(rows_of.filter(seq__gte=start).order_by("seq").values_list(*columns))
        if rows and rows[0][0] == start and (rows[0][4], rows[0][1], rows[0][3]) == cached.last_row:
            messages = [*cached.messages, *_parse_rows(rows[1:])]
            tail = rows[-1]
        else:
            cached = None
    if cached is None or not cached.messages:
        rows = list(rows_of.order_by("seq").values_list(*columns))
        messages = _parse_rows(rows)
        tail = rows[-1] if rows else (0, "", "", None, "", "")
    if messages:
        store.put(
            key,
            ParsedLog(
                messages=messages,
                last_row=(tail[4], tail[1], tail[3]),
                chars=sum(m.chars for m in messages),
            ),
        )
    return list(messages)


def agent_cut(operations: Sequence[Operation]) -> int:
    """The seq before which an agent's own compaction hides the log (0: none)."""
    return max(
        (op.keep_from_seq for op in operations if isinstance(op, AgentCompactionOperation)),
        default=0,
    )


def load_operations(session: AgentSession) -> list[Operation]:
    rows = (
        CompactionOperation.objects.filter(session=session)
        .order_by("pk")
        .values_list("data", flat=True)
    )
    return [operation_from_dict(data) for data in rows]


def derive(
    session: AgentSession, *, use_cache: bool = True
) -> tuple[list[Message], list[Operation], CoreSurface]:
    log = load_log(session, use_cache=use_cache)
    operations = load_operations(session)
    return log, operations, derive_surface(log, operations)


def store_surface(
    session: AgentSession,
    fmt: str,
    surface: CoreSurface,
    *,
    bump: bool,
    log_messages: int | None = None,
    checkpoints: Sequence[tuple[int, int]] = (),
) -> Surface:
    """Write the derived surface as the session's materialised one (caller holds the lock).

    `log_messages`: the log's length when the caller knows it (else counted). `checkpoints`:
    (log length, surface chars) of requests that ended inside the append being stored, oldest
    first; each gets a surface version of its own before this one's (D1/D6: "what did the
    model see on turn N" stays answerable, and the chars fit the session's calibration).
    """
    body = canonical_json(surface, format=format_of(fmt)).decode("ascii")
    state, _ = Surface.objects.get_or_create(session=session, defaults={"format": fmt})
    operations = CompactionOperation.objects.filter(session=session).count()
    if checkpoints:
        SurfaceVersion.objects.bulk_create(
            SurfaceVersion(
                session=session,
                version=state.version + i,
                log_messages=count,
                operations=operations,
                chars=chars,
            )
            for i, (count, chars) in enumerate(checkpoints, start=1)
        )
        state.version += len(checkpoints)
    if bump:
        state.version += 1
    state.format = fmt
    state.body = body
    state.etag = hashlib.sha256(f"{state.version}:{body}".encode()).hexdigest()[:32]
    state.chars = surface.chars
    state.tokens_estimate = surface.tokens
    state.messages = len(surface.messages)
    state.seqs = [message.seq for message in surface.messages]
    count = (
        LogMessage.objects.filter(session=session).count() if log_messages is None else log_messages
    )
    state.log_hash = _log_hash_through(session, state, count)
    state.log_messages = count
    state.save()
    SurfaceVersion.objects.get_or_create(
        session=session,
        version=state.version,
        defaults={
            "log_messages": state.log_messages,
            "operations": operations,
            "chars": surface.chars,
        },
    )
    set_surface_version(session.pk, state.version)
    return state


def _log_hash_through(session: AgentSession, state: Surface, count: int) -> str:
    """The hash of the log's first `count` messages: the stored chain extended by the rows
    appended since (an append reads only its own rows), from scratch when none is stored."""
    if state.log_hash and state.log_messages <= count:
        return _chain(session, state.log_hash, state.log_messages, count)
    return _chain(session, LOG_HASH_START, 0, count)


def _chain(session: AgentSession, start: str, first: int, count: int) -> str:
    """`start` (the hash of the log's first `first` messages) extended through `count`."""
    if first == count:
        return start
    digests = (
        LogMessage.objects.filter(session=session, seq__gte=first, seq__lt=count)
        .order_by("seq")
        .values_list("raw_hash", flat=True)
    )
    return log_hash(digests, start)


def log_position(state: Surface) -> tuple[int, str]:
    """(seq of the last log message the surface covers, hash of the log up to it): what a
    client compares with what it appended before it uses the surface. A row stored before the
    hash was kept has it computed here (one read of the log's hashes)."""
    digest = state.log_hash
    if not digest and state.log_messages:
        digest = _chain(state.session, LOG_HASH_START, 0, state.log_messages)
    return state.log_messages - 1, digest


def version_log_position(session: AgentSession, log_messages: int) -> tuple[int, str]:
    """The log position of an earlier surface version (its log's first `log_messages`)."""
    return log_messages - 1, _chain(session, LOG_HASH_START, 0, log_messages)


def stored_surface_messages(state: Surface) -> list[Message] | None:
    """The surface's messages read back from the stored body, with their seqs: what the model
    sees now, without parsing the log or deriving (equal to `derive(session)[2].messages` as
    the viewer shows them). None for a row stored before its seqs were, or a body that does not
    read back; the caller derives then."""
    if len(state.seqs) != state.messages:
        return None
    try:
        document = json.loads(state.body)
        if state.format == "anthropic":
            parsed = parse_anthropic(document["messages"], system=document.get("system"))
        else:
            parsed = parse_openai(document["messages"])
    except (TranscriptError, ValueError, KeyError, TypeError):
        return None
    if len(parsed) != len(state.seqs):
        return None
    return [replace(message, seq=seq) for message, seq in zip(parsed, state.seqs, strict=True)]


def surface_at(session: AgentSession, version: int) -> CoreSurface | None:
    """The surface exactly as it was at `version`, rebuilt from the log and operations. None
    when the version is not recorded, or when it showed a message whose text log retention
    removed and no archive gives it back (never a surface with that message made up)."""
    record = SurfaceVersion.objects.filter(session=session, version=version).first()
    if record is None:
        return None
    operations = load_operations(session)[: record.operations]
    # From the agent's cut then: a version of a long imported session reads its last segment,
    # not the whole log.
    log = load_log(session, from_seq=agent_cut(operations))
    restored = _restored(session, [m for m in log if m.seq < record.log_messages], operations)
    return None if restored is None else derive_surface(restored, operations)


def _restored(
    session: AgentSession, log: list[Message], operations: Sequence[Operation]
) -> list[Message] | None:
    """`log` with each message whose text log retention removed and which these operations
    show (an earlier version's, before the summary that hid it) read back from its archive:
    an earlier surface is rebuilt exactly as it was. None when an archive cannot give one
    back."""
    hidden = set(hidden_seqs(log, operations))
    wanted = [m.seq for m in log if is_removed(m) and m.seq not in hidden]
    if not wanted:
        return log
    texts = archived_texts(session.pk, wanted)
    if len(texts) < len(wanted):
        return None
    caps = dict(
        LogMessage.objects.filter(session=session, seq__in=wanted).values_list("seq", "bound_cap")
    )
    return [
        parse_message(
            _without_seq(json.loads(texts[m.seq][1])),
            format=m.format,
            seq=m.seq,
            bound=BoundSpec(cap) if (cap := caps.get(m.seq)) is not None else None,
        )
        if m.seq in texts
        else m
        for m in log
    ]


def record_version_chars(session: AgentSession, versions: Sequence[int]) -> dict[int, int]:
    """The size of each of `versions` stored before sizes were recorded, rebuilt from the log
    (`surface_at`) and recorded on its row: the one write of a stored version's size. A version
    the log cannot rebuild is left out."""
    found: dict[int, int] = {}
    for version in versions:
        surface = surface_at(session, version)
        if surface is not None:
            found[version] = surface.chars
            SurfaceVersion.objects.filter(session=session, version=version).update(
                chars=surface.chars
            )
    return found


def chars_appended_after_reply(session_id: int, surface_version: int) -> KindChars | None:
    """D6: what the log holds after the reply to a call whose request used `surface_version`,
    by kind.

    The request held the log's first `log_messages` messages at that version; the first
    assistant message after them is the reply (counted as output tokens), and everything after
    the reply — tool results, new user input — is what the next request adds. None when the
    session has no record of that version.
    """
    record = SurfaceVersion.objects.filter(session_id=session_id, version=surface_version).first()
    if record is None:
        return None
    rows = LogMessage.objects.filter(session_id=session_id, seq__gte=record.log_messages).order_by(
        "seq"
    )
    return appended_after_reply(rows.values_list("role", "chars", "tool_chars"))


def tokens_appended_after_reply(session_id: int, surface_version: int) -> int | None:
    """D6, the projection's port: the tokens of `chars_appended_after_reply`, at the session's
    learned rates (`compaction.token_rates.session_token_rates`)."""
    appended = chars_appended_after_reply(session_id, surface_version)
    if appended is None:
        return None
    return session_token_rates(session_id).tokens(appended)


def append_messages(
    *,
    session: AgentSession,
    fmt: str,
    system: Span | None,
    messages: Sequence[Span],
    held: HeldLogs | None = None,
    checkpoints: Sequence[int] = (),
) -> AppendResult:
    """Append messages to the session's log (idempotent on `seq`) and re-derive the surface.

    Each message's original JSON text is kept byte for byte. The same content again at a taken
    seq is a duplicate; different content is a conflict (409). New messages must continue the log
    without a gap and keep the pairing rules (a result needs its call, call ids are unique).
    The Anthropic `system` prompt is the log's seq 0: it is accepted on the append that starts
    the log, whose messages then begin at seq 1.

    Reads only the stored rows at the seqs sent and the log's parse from the agent's cut (from
    `held`, the caller's own parse, when given: see `HeldLogs`), so an append costs what it
    adds, not the log's length. `checkpoints`: log lengths inside this append at which a
    request ended; each gets a surface version (with its chars) before the append's own.
    """
    if fmt not in FORMATS:
        raise FieldError("format", f"must be one of {', '.join(FORMATS)}")
    if system is not None and fmt != "anthropic":
        raise FieldError(
            "system", "is for the Anthropic format; send OpenAI system prompts as a message"
        )
    items = _checked_items(messages)
    policy = effective_policy(session.profile)
    with transaction.atomic():
        lock_session(session.pk)
        state = Surface.objects.filter(session=session).first()
        if state is not None and state.format != fmt:
            raise FieldError(
                "format", f"this session's transcript is in the {state.format} format", status=409
            )
        next_seq, new_items, duplicates = _sort_sent(session, system, items)
        if not new_items:
            return AppendResult(duplicates=duplicates, surface=state)
        log, parsed, operations = _store_messages(
            session, fmt, new_items, policy.max_result_chars, held
        )
        counts = sorted({c for c in checkpoints if next_seq < c < next_seq + len(new_items)})
        surface, chars_at = derive_surface_at(log, operations, counts)
        state = store_surface(
            session,
            fmt,
            surface,
            bump=True,
            log_messages=next_seq + len(new_items),
            checkpoints=list(zip(counts, chars_at, strict=True)),
        )
        _record_appended(session, parsed)
    return AppendResult(
        created=[seq for seq, _, _ in new_items], duplicates=duplicates, surface=state
    )


def _sort_sent(
    session: AgentSession, system: Span | None, items: list[tuple[int, int, Span]]
) -> tuple[int, list[tuple[int, int, Span]], list[int]]:
    """The plan of an append: (the log's length, the new messages, the duplicate seqs).

    A taken seq with the same content is a duplicate, with other content a 409; the new
    messages continue the log from its length without a gap (else a 422 naming the message).
    Reads only the stored rows at the seqs sent; the caller holds the session lock."""
    # The log is seqs 0..n-1 without gaps (every append continues it), so its length is
    # its last seq + 1: one index probe, where reading every stored seq grew with the log.
    last = LogMessage.objects.filter(session=session).aggregate(last=Max("seq"))["last"]
    next_seq = 0 if last is None else last + 1
    sent = Q(seq__gte=items[0][0], seq__lte=items[-1][0])
    if system is not None:
        sent |= Q(seq=0)
    existing = dict(LogMessage.objects.filter(sent, session=session).values_list("seq", "raw_hash"))
    if system is not None:
        items = [
            (0, -1, Span({"role": "system", "content": system.value}, _system_raw(system))),
            *items,
        ]
        if items[1][0] != 1 and 0 not in existing:
            raise FieldError(
                "messages.0.seq",
                "with a top-level system prompt (seq 0) the messages start at seq 1",
            )
    new_items: list[tuple[int, int, Span]] = []
    duplicates: list[int] = []
    for seq, index, span in items:
        name = "system" if index < 0 else f"messages.{index}"
        digest = content_hash(_without_seq(span.value))
        if seq in existing:
            if existing[seq] != digest:
                raise FieldError(
                    f"{name}.seq", f"seq {seq} is already stored with different content", status=409
                )
            duplicates.append(seq)
            continue
        expected = next_seq + len(new_items)
        if seq != expected:
            raise FieldError(
                f"{name}.seq", f"expected seq {expected} (the log holds {next_seq}), got {seq}"
            )
        new_items.append((seq, index, span))
    return next_seq, new_items, duplicates


def _store_messages(
    session: AgentSession,
    fmt: str,
    new_items: list[tuple[int, int, Span]],
    cap: int,
    held: HeldLogs | None,
) -> tuple[list[Message], list[Message], list[Operation]]:
    """The apply of an append: parse the new messages after the log from the agent's cut and
    store them, each row with its original text. Returns (the log from the cut, the parsed new
    messages, the operations in force). `held` is extended with what was stored, so the log it
    holds is always the stored log from the cut."""
    operations = load_operations(session)
    cut = agent_cut(operations)
    preceding = load_log(session, from_seq=cut, cache=held)
    parsed = _parse(fmt, preceding, new_items, BoundSpec(cap))
    rows = [
        LogMessage(
            session=session,
            seq=message.seq,
            format=fmt,
            role=message.role,
            raw=span.text,
            raw_hash=content_hash(_without_seq(span.value)),
            chars=message.chars,
            tool_chars=message_kind_chars(message).tool,
            bound_cap=cap,
        )
        for message, (_, _, span) in zip(parsed, new_items, strict=True)
    ]
    LogMessage.objects.bulk_create(rows)
    log = [*preceding, *parsed]
    if held is not None:
        held.put(
            cache_key(session, cut),
            ParsedLog(
                messages=log,
                last_row=(rows[-1].raw_hash, fmt, cap),
                chars=sum(m.chars for m in log),
            ),
        )
    return log, parsed, operations


def _record_appended(session: AgentSession, parsed: Sequence[Message]) -> None:
    """The record of an append (D6): the projection counts what was appended (or the grown
    post-compaction surface), at the session's learned rates; relief is requested after the
    commit when that crosses the threshold, never for a rolled-back append."""
    appended = kind_chars(parsed)
    over = refresh_projection(
        session.pk, appended_tokens=session_token_rates(session.pk).tokens(appended)
    )
    if over is not None:
        transaction.on_commit(lambda: request_relief([session.pk]))


def _system_raw(system: Span) -> str:
    return '{"seq":0,"role":"system","content":' + system.text + "}"


def _checked_items(messages: Sequence[Span]) -> list[tuple[int, int, Span]]:
    if not messages:
        raise FieldError("messages", "must hold at least one message")
    items = []
    previous: int | None = None
    for index, span in enumerate(messages):
        value = span.value
        if not isinstance(value, dict):
            raise FieldError(f"messages.{index}", "must be a JSON object")
        seq = value.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise FieldError(f"messages.{index}.seq", "is required: an integer position in the log")
        if not 0 <= seq < 2**31:
            raise FieldError(f"messages.{index}.seq", "must be between 0 and 2147483647")
        if previous is not None and seq <= previous:
            raise FieldError(f"messages.{index}.seq", f"must increase (after {previous})")
        previous = seq
        items.append((seq, index, span))
    return items


def _parse(
    fmt: str, preceding: list[Message], new_items: list[tuple[int, int, Span]], bound: BoundSpec
) -> list[Message]:
    system = None
    bodies: list[dict[str, Any]] = []
    first_seq = new_items[0][0]
    for _, index, span in new_items:
        body = _without_seq(span.value)
        if index < 0:
            system = body["content"]
            continue
        bodies.append(body)
    try:
        if fmt == "anthropic":
            return parse_anthropic(
                bodies, system=system, first_seq=first_seq, preceding=preceding, bound=bound
            )
        return parse_openai(bodies, first_seq=first_seq, preceding=preceding, bound=bound)
    except TranscriptError as exc:
        offset = 1 if system is not None else 0
        position = exc.index + offset
        index = new_items[position][1] if 0 <= position < len(new_items) else exc.index
        name = "system" if index < 0 else f"messages.{index}"
        raise FieldError(name, str(exc)) from None


def surface_document(fmt: str, version: int, position: tuple[int, str], canonical: bytes) -> bytes:
    """A surface as served: its format, version and the log position it follows, then the
    canonical messages (and system). A version fixes its log position, so the same version
    gives the same bytes (D1)."""
    seq, digest = position
    head = f'{{"format":"{fmt}","surface_version":{version},"log_seq":{seq},"log_hash":"{digest}",'
    return head.encode("ascii") + canonical[1:]


def surface_response_bytes(state: Surface) -> bytes:
    """The stored surface as served: byte-identical until the version changes (D1)."""
    return surface_document(
        state.format, state.version, log_position(state), state.body.encode("ascii")
    )
