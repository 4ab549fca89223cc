"""The one write path of telemetry: a batch of call records in, per-item outcomes out.

A batch costs a constant number of SQL statements whatever its size: sessions are upserted and
locked in two, existing calls read in one, new calls inserted in one, affected turns re-derived
and upserted in two, and session figures re-derived and written in three. Turn and session
figures are recomputed from their rows (`telemetry.accounting`), never incremented, so a retry or
a concurrent batch cannot leave them off by one.
"""

from __future__ import annotations

import hashlib
import json
import time
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Literal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone
from django.utils.module_loading import import_string
from pydantic import ValidationError

from telemetry import safejson
from telemetry.accounting import CallFigures, TurnFigures, summarize_turn
from telemetry.catalogue import load_catalogue
from telemetry.models import AgentKey, AgentProfile, AgentSession, LLMCall, Turn
from telemetry.policies import effective_policy
from telemetry.policy import PolicyValues
from telemetry.pressure import pressure as pressure_of
from telemetry.pressure import pressure_band, projected_next_request, round_signal
from telemetry.pricing import ModelPrice, billed_cost, billed_no_cache_cost, find_price
from telemetry.provider_context import ProviderUsage, read_provider_usage
from telemetry.provider_events import record_provider_events
from telemetry.rollups import add_calls as add_to_hourly_usage
from telemetry.schemas import RecordIn
from telemetry.usage import NormalizedUsage, UsageError, normalize_usage
from telemetry.windows import LearnedWindow, WindowInForce, window_in_force

Status = Literal["created", "duplicate", "conflict", "invalid"]


@dataclass
class ItemResult:
    index: int
    status: Status
    session_id: str | None = None
    turn: int | None = None
    call: int | None = None
    field: str | None = None
    detail: str | None = None
    nudge: str | None = None
    stop: bool = False


@dataclass
class IngestResult:
    items: list[ItemResult]
    sessions: list[AgentSession] = field(default_factory=list)
    policy: PolicyValues | None = None
    # Sessions whose pressure reached the prune threshold; the caller may enqueue relief.
    over_threshold: list[int] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for item in self.items if item.status == status)


@dataclass
class _Valid:
    index: int
    record: RecordIn
    usage: NormalizedUsage
    payload_hash: str
    # The passes to bill and the provider-side compactions/edits (`telemetry.provider_context`).
    provided: ProviderUsage


def payload_hash(record: RecordIn) -> str:
    """SHA-256 of the record as submitted, canonical: sorted keys, defaults excluded, `at` in UTC.

    Server defaults (a missing `at`, `call` 0) never enter it, so a replay that leaves `at` out
    matches the stored call although the server stamped that call with its arrival time.
    """
    data = record.model_dump(mode="python", exclude_defaults=True)
    if record.at is not None:
        data["at"] = record.at.astimezone(UTC).isoformat()
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _validation_field(error: ValidationError, prefix: str) -> tuple[str, str]:
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = "is not a known field"
    name = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "body"
    return name, message


def validate_items(
    raw_items: Sequence[object], *, policy: PolicyValues, batch: bool
) -> tuple[list[ItemResult | None], list[_Valid]]:
    """Validate and normalise each item on its own: one bad item never drops the others."""
    outcomes: list[ItemResult | None] = []
    valid: list[_Valid] = []
    for index, raw in enumerate(raw_items):
        prefix = f"records.{index}." if batch else ""
        if not isinstance(raw, dict):
            name = prefix.rstrip(".") or "body"
            outcomes.append(
                ItemResult(index, "invalid", field=name, detail=f"{name}: must be a JSON object")
            )
            continue
        unsafe = safejson.problem(raw, base=prefix.rstrip("."))
        if unsafe is not None:  # a lone surrogate, NaN, too deep: refused, the batch goes on
            outcomes.append(ItemResult(index, "invalid", field=unsafe[0], detail=": ".join(unsafe)))
            continue
        try:
            record = RecordIn.model_validate(raw)
        except ValidationError as exc:
            name, message = _validation_field(exc, prefix)
            outcomes.append(ItemResult(index, "invalid", field=name, detail=f"{name}: {message}"))
            continue
        try:
            usage = normalize_usage(
                record.usage,
                provider=record.provider,
                model=record.model,
                cache_ttl=policy.cache_ttl,
            )
            provided = read_provider_usage(
                record.usage,
                usage,
                cache_ttl=policy.cache_ttl,
                context_management=record.context_management,
                output_items=record.output_items,
            )
        except UsageError as exc:
            name = exc.field if exc.field.startswith(_OWN_FIELDS) else f"usage.{exc.field}"
            if exc.field == "provider":
                name = "provider"
            outcomes.append(_invalid(index, record, f"{prefix}{name}", exc.message))
            continue
        if (
            record.window_tokens is not None
            and record.window_tokens <= policy.reserved_output_tokens
        ):
            outcomes.append(
                _invalid(
                    index,
                    record,
                    f"{prefix}window_tokens",
                    f"must exceed the profile's reserved_output_tokens ({policy.reserved_output_tokens})",
                )
            )
            continue
        outcomes.append(None)
        valid.append(_Valid(index, record, provided.context, payload_hash(record), provided))
    return outcomes, valid


_OWN_FIELDS = ("usage", "context_management", "output_items")


def _invalid(index: int, record: RecordIn, name: str, message: str) -> ItemResult:
    return ItemResult(
        index,
        "invalid",
        session_id=record.session_id,
        turn=record.turn,
        call=record.call,
        field=name,
        detail=f"{name}: {message}",
    )


def ingest_records(
    *,
    key: AgentKey,
    raw_items: Sequence[object],
    batch: bool,
    on_commit: Callable[[list[int]], None] | None = None,
) -> IngestResult:
    """Store the valid, new records of one submission and re-derive the figures they touch.

    Idempotent on (session, turn, call) — or on `request_id` when given: the same payload again
    is a `duplicate` and changes nothing; different content under a taken key is a `conflict`.
    `on_commit` receives the ids of sessions at or above the prune threshold, after commit.
    """
    profile = key.profile
    policy = effective_policy(profile)
    outcomes, valid = validate_items(raw_items, policy=policy, batch=batch)
    result = IngestResult(items=[], policy=policy)
    if valid:
        with transaction.atomic():
            sessions = _lock_sessions(profile, {v.record.session_id for v in valid})
            catalogue = _OnceCatalogue()
            created_ids, decided, turn_calls = _store_calls(profile, sessions, valid, catalogue)
            result.sessions = _refresh_sessions(profile, policy, sessions, created_ids, catalogue)
            for item in decided:
                calls = turn_calls.get((sessions[item.session_id or ""].pk, item.turn or 0))
                if calls is not None and item.status in ("created", "duplicate"):
                    # D8: the rounds this call completes (its own position in the turn), so a
                    # batch of calls 30-45 flags only those at or past the limits.
                    rounds = bisect_right(calls, item.call or 0)
                    signal = round_signal(rounds, policy.round_soft_limit, policy.round_hard_cap)
                    item.nudge = policy.nudge_text if signal in ("nudge", "stop") else None
                    item.stop = signal == "stop"
                outcomes[item.index] = item
            result.over_threshold = [s.pk for s in result.sessions if needs_relief(s, policy)]
            if on_commit is not None and result.over_threshold:
                ids = list(result.over_threshold)
                transaction.on_commit(lambda: on_commit(ids))
    result.items = [item for item in outcomes if item is not None]
    return result


def _lock_sessions(profile: AgentProfile, external_ids: set[str]) -> dict[str, AgentSession]:
    AgentSession.objects.bulk_create(
        [AgentSession(profile=profile, external_id=eid) for eid in sorted(external_ids)],
        ignore_conflicts=True,
    )
    # Row locks in id order: concurrent batches on the same sessions serialise without deadlock.
    # (SQLite has no row locks; its IMMEDIATE transactions already serialise writers.)
    rows = (
        AgentSession.objects.select_for_update()
        .filter(profile=profile, external_id__in=external_ids)
        .order_by("pk")
    )
    found = {}
    for row in rows:
        row.profile = profile  # the caller's instance: the payload reads it without a query
        found[row.external_id] = row
    return found


class _OnceCatalogue:
    """The model catalogue, read at most once per submission."""

    def __init__(self) -> None:
        self._rows: list[ModelPrice] | None = None

    def get(self) -> list[ModelPrice]:
        if self._rows is None:
            self._rows = load_catalogue()
        return self._rows


def _store_calls(
    profile: AgentProfile,
    sessions: dict[str, AgentSession],
    valid: list[_Valid],
    once: _OnceCatalogue,
) -> tuple[set[int], list[ItemResult], dict[tuple[int, int], list[int]]]:
    session_ids = [s.pk for s in sessions.values()]
    turns = {v.record.turn for v in valid}
    request_ids = {v.record.request_id for v in valid if v.record.request_id is not None}
    existing = LLMCall.objects.filter(session_id__in=session_ids).filter(
        Q(turn__in=turns) | Q(request_id__in=request_ids)
    )
    by_position: dict[tuple[int, int, int], str] = {}
    by_request: dict[tuple[int, str], str] = {}
    for sid, turn, call, request_id, digest in existing.values_list(
        "session_id", "turn", "call", "request_id", "payload_hash"
    ):
        by_position[(sid, turn, call)] = digest
        if request_id is not None:
            by_request[(sid, request_id)] = digest

    prices: dict[str, ModelPrice | None] = {}
    new_calls: list[LLMCall] = []
    new_valid: list[_Valid] = []
    decided: list[ItemResult] = []
    created_sessions: set[int] = set()
    now = timezone.now()
    for v in valid:
        record = v.record
        session = sessions[record.session_id]
        base = ItemResult(
            v.index, "created", session_id=record.session_id, turn=record.turn, call=record.call
        )
        position = (session.pk, record.turn, record.call)
        if record.request_id is not None and (session.pk, record.request_id) in by_request:
            same = by_request[(session.pk, record.request_id)] == v.payload_hash
            base.status = "duplicate" if same else "conflict"
            if not same:
                base.field = "request_id"
                base.detail = "request_id: already stored with different content"
        elif position in by_position:
            same = by_position[position] == v.payload_hash
            base.status = "duplicate" if same else "conflict"
            if not same:
                base.field = "call"
                base.detail = (
                    f"turn {record.turn} call {record.call} of session {record.session_id!r} "
                    "is already stored with different content"
                )
        else:
            by_position[position] = v.payload_hash
            if record.request_id is not None:
                by_request[(session.pk, record.request_id)] = v.payload_hash
            if record.model not in prices:
                prices[record.model] = find_price(record.model, once.get())
            new_calls.append(_call_row(session, v, prices[record.model], now))
            new_valid.append(v)
            created_sessions.add(session.pk)
        decided.append(base)

    _insert_calls(new_calls)
    record_provider_events(
        [(c, v.provided.events) for c, v in zip(new_calls, new_valid, strict=True)]
    )
    add_to_hourly_usage(profile.pk, new_calls)  # the overview's hour rollups
    touched = {(c.session_id, c.turn) for c in new_calls}
    touched |= {
        (sessions[d.session_id or ""].pk, d.turn or 0) for d in decided if d.status == "duplicate"
    }
    turn_calls = _rederive_turns(touched, write={(c.session_id, c.turn) for c in new_calls})
    return created_sessions, decided, turn_calls


def stored_prefix(record: RecordIn) -> list[dict[str, Any]] | None:
    """The record's prefix as stored: segments named `tools`, `system`, `message k` (D1/D2)."""
    if record.prefix is None:
        return None
    out: list[dict[str, Any]] = []
    messages = 0
    for segment in record.prefix:
        name: str = segment.kind
        if name == "message":
            name = f"message {messages}"
            messages += 1
        item: dict[str, Any] = {"name": name, "hash": segment.hash, "tokens": segment.tokens}
        if segment.text is not None:
            item["text"] = segment.text
        out.append(item)
    return out


def _call_row(session: AgentSession, v: _Valid, price: ModelPrice | None, now: datetime) -> LLMCall:
    usage, record = v.usage, v.record
    billed = v.provided.billed  # every sampling pass, a compaction iteration included
    cost = billed_cost(billed, price) if price is not None else None
    return LLMCall(
        session=session,
        turn=record.turn,
        call=record.call,
        request_id=record.request_id,
        model=record.model,
        provider=usage.provider,
        uncached_input=usage.uncached_input,
        cache_read=usage.cache_read,
        cache_write_5m=usage.cache_write_5m,
        cache_write_1h=usage.cache_write_1h,
        output=usage.output,
        reasoning_output=usage.reasoning_output,
        reported_cache=usage.reported_cache,
        context_tokens=usage.context_tokens,
        raw_usage=record.usage,
        flags=list(usage.flags),
        request_chars=record.request_chars,
        appended_chars=record.appended_chars,
        window_tokens=record.window_tokens,
        surface_version=record.surface_version,
        prefix=stored_prefix(record),
        at=record.at or now,
        cost_uncached_input=cost.uncached_input if cost else None,
        cost_cache_read=cost.cache_read if cost else None,
        cost_cache_write_5m=cost.cache_write_5m if cost else None,
        cost_cache_write_1h=cost.cache_write_1h if cost else None,
        cost_output=cost.output if cost else None,
        cost_usd=cost.total if cost else None,
        no_cache_cost_usd=billed_no_cache_cost(billed, price) if price is not None else None,
        long_context=cost.long_context if cost else False,
        payload_hash=v.payload_hash,
    )


_CALL_FIELDS = (
    "session_id",
    "turn",
    "call",
    "at",
    "model",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning_output",
    "reported_cache",
    "appended_chars",
    "window_tokens",
    "surface_version",
    "cost_uncached_input",
    "cost_cache_read",
    "cost_cache_write_5m",
    "cost_cache_write_1h",
    "cost_output",
    "no_cache_cost_usd",
)


def _figures_of(row: dict[str, Any]) -> CallFigures:
    buckets = (
        row["cost_uncached_input"],
        row["cost_cache_read"],
        row["cost_cache_write_5m"],
        row["cost_cache_write_1h"],
        row["cost_output"],
    )
    return CallFigures(
        call=row["call"],
        at=row["at"],
        model=row["model"],
        uncached_input=row["uncached_input"],
        cache_read=row["cache_read"],
        cache_write_5m=row["cache_write_5m"],
        cache_write_1h=row["cache_write_1h"],
        output=row["output"],
        reasoning_output=row["reasoning_output"],
        reported_cache=row["reported_cache"],
        appended_chars=row["appended_chars"],
        window_tokens=row["window_tokens"],
        surface_version=row["surface_version"],
        cost_buckets=None if buckets[0] is None else buckets,
        no_cache_cost=row["no_cache_cost_usd"],
    )


def _rederive_turns(
    touched: set[tuple[int, int]], *, write: set[tuple[int, int]]
) -> dict[tuple[int, int], list[int]]:
    """Re-derive the figures of `touched` turns from all their calls; upsert those in `write`.

    Returns each touched turn's call numbers, sorted.
    """
    if not touched:
        return {}
    grouped: dict[tuple[int, int], list[CallFigures]] = defaultdict(list)
    rows = LLMCall.objects.filter(
        session_id__in={sid for sid, _ in touched}, turn__in={turn for _, turn in touched}
    ).values(*_CALL_FIELDS)
    for row in rows:
        pair = (row["session_id"], row["turn"])
        if pair in touched:
            grouped[pair].append(_figures_of(row))
    figures = {pair: summarize_turn(calls) for pair, calls in grouped.items()}
    upserts = [_turn_row(sid, turn, figures[(sid, turn)]) for sid, turn in sorted(write)]
    if upserts:
        Turn.objects.bulk_create(
            upserts,
            update_conflicts=True,
            unique_fields=["session", "turn"],
            update_fields=_TURN_UPDATE_FIELDS,
        )
    return {pair: sorted(c.call for c in calls) for pair, calls in grouped.items()}


_TURN_UPDATE_FIELDS = [
    "calls",
    "context_tokens",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning_output",
    "cache_reported_calls",
    "cache_read_reported",
    "cache_denominator",
    "cost_uncached_input",
    "cost_cache_read",
    "cost_cache_write_5m",
    "cost_cache_write_1h",
    "cost_output",
    "cost_usd",
    "no_cache_cost_usd",
    "unpriced_calls",
    "first_at",
    "last_at",
    "model",
    "last_call",
    "last_call_context_tokens",
    "last_call_output",
    "last_call_reasoning_output",
    "last_call_appended_chars",
    "last_call_window_tokens",
    "surface_version",
]


def _turn_row(session_id: int, turn: int, f: TurnFigures) -> Turn:
    buckets: tuple[Decimal | None, ...] = f.cost_buckets or (None,) * 5
    return Turn(
        session_id=session_id,
        turn=turn,
        calls=f.calls,
        context_tokens=f.context_tokens,
        uncached_input=f.uncached_input,
        cache_read=f.cache_read,
        cache_write_5m=f.cache_write_5m,
        cache_write_1h=f.cache_write_1h,
        output=f.output,
        reasoning_output=f.reasoning_output,
        cache_reported_calls=f.cache_reported_calls,
        cache_read_reported=f.cache_read_reported,
        cache_denominator=f.cache_denominator,
        cost_uncached_input=buckets[0],
        cost_cache_read=buckets[1],
        cost_cache_write_5m=buckets[2],
        cost_cache_write_1h=buckets[3],
        cost_output=buckets[4],
        cost_usd=f.cost_usd,
        no_cache_cost_usd=f.no_cache_cost_usd,
        unpriced_calls=f.unpriced_calls,
        first_at=f.first_at,
        last_at=f.last_at,
        model=f.model,
        last_call=f.last_call,
        last_call_context_tokens=f.last_call_context_tokens,
        last_call_output=f.last_call_output,
        last_call_reasoning_output=f.last_call_reasoning_output,
        last_call_appended_chars=f.last_call_appended_chars,
        last_call_window_tokens=f.last_call_window_tokens,
        surface_version=f.surface_version,
    )


def _refresh_sessions(
    profile: AgentProfile,
    policy: PolicyValues,
    sessions: dict[str, AgentSession],
    created_in: set[int],
    once: _OnceCatalogue,
) -> list[AgentSession]:
    """Re-derive the stored figures of `sessions` from their turns (three statements)."""
    by_pk = {s.pk: s for s in sessions.values()}
    aggregates = (
        Turn.objects.filter(session_id__in=by_pk)
        .values("session_id")
        .annotate(
            n_turns=Count("id"),
            n_calls=Sum("calls"),
            peak=Max("context_tokens"),
            read=Sum("cache_read_reported"),
            denominator=Sum("cache_denominator"),
            reported=Sum("cache_reported_calls"),
            cost=Sum("cost_usd"),
            no_cache=Sum("no_cache_cost_usd"),
            unpriced=Sum("unpriced_calls"),
            last_turn_no=Max("turn"),
            last_seen=Max("last_at"),
            max_rounds=Max("calls"),
        )
    )
    agg = {row["session_id"]: row for row in aggregates}
    latest_filter = Q(pk__in=[])
    for sid, row in agg.items():
        latest_filter |= Q(session_id=sid, turn=row["last_turn_no"])
    latest = {t.session_id: t for t in Turn.objects.filter(latest_filter)}
    for session in by_pk.values():
        found = agg.get(session.pk)
        last = latest.get(session.pk)
        if found is None or last is None:
            continue
        catalogue = once.get()
        row = found
        session.model = last.model
        session.turns_count = row["n_turns"]
        session.calls_count = row["n_calls"]
        session.last_turn = last.turn
        session.last_turn_rounds = last.calls
        session.max_turn_rounds = row["max_rounds"]
        session.current_context_tokens = last.last_call_context_tokens
        session.peak_context_tokens = row["peak"]
        session.cache_read_tokens = row["read"] or 0
        session.cache_denominator_tokens = row["denominator"] or 0
        session.cache_reported_calls = row["reported"] or 0
        session.last_turn_cache_hit_ratio = last.cache_hit_ratio
        session.cost_usd = row["cost"]
        session.no_cache_cost_usd = row["no_cache"]
        session.unpriced_calls = row["unpriced"] or 0
        session.last_seen_at = row["last_seen"]
        if session.pk in created_in:
            # D6: a new report supersedes the surface estimate left by a compaction.
            session.surface_estimate_tokens = None
        window = resolve_window(profile, last, catalogue, session)
        session.window_tokens = window.tokens if window else None
        session.window_source = window.source if window else ""
        _project(session, last, policy)
    _write_sessions(list(by_pk.values()))
    return list(by_pk.values())


def _insert_calls(calls: list[LLMCall]) -> None:
    """Insert new calls in one statement: COPY on PostgreSQL, a bulk INSERT elsewhere.

    Django's bulk INSERT spent most of a 1,000-record batch preparing values field by field
    and quoting them client-side (make bench, P1); COPY sends the rows as they are. The
    (session, turn, call) and request-id keys are already checked under the session locks, so
    COPY meets no conflict that bulk_create would not also have raised.
    """
    if connection.vendor != "postgresql" or not calls:
        LLMCall.objects.bulk_create(calls)
        return
    from psycopg.types.json import Jsonb

    fields = [f for f in LLMCall._meta.concrete_fields if not f.primary_key]
    json_fields = {f.attname for f in fields if f.get_internal_type() == "JSONField"}
    received = timezone.now()  # what auto_now_add would set
    quote = connection.ops.quote_name
    sql = (
        f"COPY {quote(LLMCall._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in fields)}) FROM STDIN"
    )
    started = time.monotonic()
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for call in calls:
            call.received_at = received
            copy.write_row(
                [
                    Jsonb(getattr(call, f.attname))
                    if f.attname in json_fields
                    else getattr(call, f.attname)
                    for f in fields
                ]
            )
    _log_statement(sql, started)


def _write_sessions(sessions: list[AgentSession]) -> None:
    """Write the re-derived session figures in one statement.

    On PostgreSQL an `UPDATE … FROM (VALUES …)`: Django's bulk_update builds a CASE per field
    and row and cost ~13 ms for a single session (make bench, P2). Elsewhere bulk_update.
    """
    if connection.vendor != "postgresql" or not sessions:
        AgentSession.objects.bulk_update(sessions, _SESSION_FIELDS)
        return
    meta = AgentSession._meta
    by_name = {f.name: f for f in meta.concrete_fields}
    fields = [by_name[name] for name in _SESSION_FIELDS]
    quote = connection.ops.quote_name
    pk = meta.pk
    assert pk is not None
    casts = [f"%s::{pk.db_type(connection)}"] + [f"%s::{f.db_type(connection)}" for f in fields]
    row = f"({', '.join(casts)})"
    columns = [quote(pk.column)] + [quote(f.column) for f in fields]
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET "
        + ", ".join(f"{c} = v.{c}" for c in columns[1:])
        + f" FROM (VALUES {', '.join([row] * len(sessions))}) AS v ({', '.join(columns)})"
        + f" WHERE t.{columns[0]} = v.{columns[0]}"
    )
    params: list[Any] = []
    for session in sessions:
        params.append(session.pk)
        params.extend(f.get_db_prep_save(getattr(session, f.attname), connection) for f in fields)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _log_statement(sql: str, started: float) -> None:
    """Count a statement run on the raw driver cursor like Django counts its own."""
    if connection.queries_logged:
        connection.queries_log.append({"sql": sql, "time": f"{time.monotonic() - started:.3f}"})


_SESSION_FIELDS = [
    "model",
    "turns_count",
    "calls_count",
    "last_turn",
    "last_turn_rounds",
    "max_turn_rounds",
    "current_context_tokens",
    "peak_context_tokens",
    "cache_read_tokens",
    "cache_denominator_tokens",
    "cache_reported_calls",
    "last_turn_cache_hit_ratio",
    "cost_usd",
    "no_cache_cost_usd",
    "unpriced_calls",
    "last_seen_at",
    "surface_estimate_tokens",
    "window_tokens",
    "window_source",
    "projected_tokens",
    "pressure",
]


def resolve_window(
    profile: AgentProfile, last: Turn, catalogue: list[ModelPrice], session: AgentSession
) -> WindowInForce | None:
    """The window in force for the session's next request (order in `telemetry.windows`)."""
    price = find_price(last.model, catalogue)
    learned = (
        LearnedWindow(session.learned_window_model, session.learned_window_tokens)
        if session.learned_window_tokens is not None
        else None
    )
    return window_in_force(
        model=last.model,
        record_window=last.last_call_window_tokens,
        learned=learned,
        overrides=profile.window_overrides or {},
        family=price.family if price else None,
        catalogue_window=price.window_tokens if price else None,
    )


def session_projection(session: AgentSession, last: Turn) -> int:
    """D6: the surface estimate after a compaction, else the latest call + reply + appended.

    The appended size is the record's `appended_chars` when the agent sent it, else what the
    transcript log holds after that call's reply (`TELEMETRY_LOG_APPENDED_PROVIDER`: telemetry
    asks through a setting so it never imports compaction).
    """
    if session.surface_estimate_tokens is not None:
        return session.surface_estimate_tokens
    appended = last.last_call_appended_chars
    if appended is None and last.surface_version is not None:
        appended = _log_appended_chars(session.pk, last.surface_version)
    return projected_next_request(
        context_tokens=last.last_call_context_tokens,
        output=last.last_call_output,
        reasoning_output=last.last_call_reasoning_output,
        appended_chars=appended or 0,
    )


def _log_appended_chars(session_id: int, surface_version: int) -> int | None:
    provider = getattr(settings, "TELEMETRY_LOG_APPENDED_PROVIDER", "")
    if not provider:
        return None
    result = import_string(provider)(session_id, surface_version)
    return None if result is None else int(result)


def _project(session: AgentSession, last: Turn, policy: PolicyValues) -> None:
    session.projected_tokens = session_projection(session, last)
    window = session.window_tokens
    session.pressure = (
        pressure_of(session.projected_tokens, window, policy.reserved_output_tokens)
        if window is not None and window > policy.reserved_output_tokens
        else None
    )


def refresh_projection(session_id: int, *, appended_tokens: int = 0) -> AgentSession | None:
    """Re-project a session after its transcript grew by `appended_tokens` (called by the
    transcript log). A standing post-compaction estimate grows by that much (D6).

    Returns the session when it needs relief, so the caller may ask for it; None otherwise.
    """
    with transaction.atomic():
        session = (
            AgentSession.objects.select_for_update().select_related("profile").get(pk=session_id)
        )
        if session.last_turn is None:
            return None
        last = Turn.objects.get(session=session, turn=session.last_turn)
        if session.surface_estimate_tokens is not None:
            session.surface_estimate_tokens += appended_tokens
        policy = effective_policy(session.profile)
        _project(session, last, policy)
        session.save(update_fields=["surface_estimate_tokens", "projected_tokens", "pressure"])
    return session if needs_relief(session, policy) else None


def needs_relief(session: AgentSession, policy: PolicyValues) -> bool:
    """At or above the prune threshold, with a transcript log to relieve, not yet tried at
    this surface version (D4)."""
    return (
        session.pressure is not None
        and session.pressure >= policy.prune_threshold
        and session.surface_version > 0
        and session.relief_tried_version != session.surface_version
    )


def session_band(session: AgentSession, policy: PolicyValues) -> str:
    return pressure_band(session.pressure, policy.prune_threshold, policy.summarize_threshold)
