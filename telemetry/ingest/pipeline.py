"""The one write path of usage records: a batch of call records in, per-item outcomes out.

This module is orchestration only; each step has its own module, reusable by every on-ramp
(the JSON API, OTLP, transcript imports):

1. `telemetry.validation`   validate and normalise each record on its own
2. `telemetry.idempotency`  created / duplicate / conflict, by a canonical payload hash
3. `telemetry.costing`      price new calls (the catalogue read once per submission)
4. `telemetry.derivation`   re-derive the touched turns and sessions from their rows
5. `telemetry.window_resolution` the window in force for each session (rule: `telemetry.windows`)
6. `telemetry.session_state` projection, pressure, needs-relief, and the session write
   (the other modules of `telemetry.ingest` hold the raw SQL of the writes, and why it is raw)

`store_records` reads as those steps: validate, choose the writer (`telemetry.ingest.writers`:
`portable` on any database, `pg_batch` and `pg_single` on PostgreSQL, the only place that asks
which database this is), let it store the submission (lock its sessions, decide each record,
write the new calls, their turns, the session figures and the hour rollups, each in a constant
number of statements), and conclude (D8's round signals, relief after commit). The writers'
table, with what each sends and the test that holds it equal to the portable one, is in
`telemetry.ingest.writers` and docs/performance.md.

`store_records` is the entry point for code that already knows the profile (OTLP, imports);
`ingest_records` is the API's, keyed by the agent key.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from telemetry.catalogue import OnceCatalogue, key_prices
from telemetry.changes import announce_after_commit
from telemetry.idempotency import StoredCall, payload_hash
from telemetry.ingest import writers
from telemetry.models import AgentKey, AgentProfile, AgentSession
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy, key_policy
from telemetry.pressure import RoundSignal, round_signal
from telemetry.session_meta import from_record
from telemetry.session_state import (
    needs_relief,
    record_metadata,
    refresh_projection,
    session_band,
    session_projection,
)
from telemetry.validation import ItemResult, Status, ValidRecord, validate_items
from telemetry.window_resolution import resolve_window

# Names other modules import from here; each lives in the module of its step.
__all__ = [
    "IngestResult",
    "ItemResult",
    "Status",
    "ingest_records",
    "needs_relief",
    "payload_hash",
    "refresh_projection",
    "resolve_window",
    "session_band",
    "session_projection",
    "store_records",
    "validate_items",
]


@dataclass
class IngestResult:
    items: list[ItemResult]
    sessions: list[AgentSession] = field(default_factory=list)
    policy: PolicyValues | None = None
    # Sessions whose pressure reached the prune threshold; the caller may enqueue relief.
    over_threshold: list[int] = field(default_factory=list)
    # The sessions of `store_records`' `metadata` whose metadata it wrote.
    metadata: frozenset[int] = frozenset()

    def count(self, status: Status) -> int:
        return sum(1 for item in self.items if item.status == status)


def ingest_records(
    *,
    key: AgentKey,
    raw_items: Sequence[object],
    batch: bool,
    on_commit: Callable[[list[int]], None] | None = None,
    locked: dict[str, AgentSession] | None = None,
    read_requests: Sequence[StoredCall] | None = None,
    metadata: frozenset[int] = frozenset(),
) -> IngestResult:
    """The API's entry point: `store_records` for the calling key's profile, with the policy and
    catalogue remembered beside the key check (a second at most, `telemetry.policy_store`)."""
    return store_records(
        profile=key.profile,
        raw_items=raw_items,
        batch=batch,
        on_commit=on_commit,
        policy=key_policy(key.pk, key.profile),
        catalogue=key_prices(key.pk),
        locked=locked,
        read_requests=read_requests,
        metadata=metadata,
    )


def latest_accepted_at() -> datetime | None:
    """The latest `at` a record may carry: the clock plus TELEMETRY_CLOCK_SKEW_SECONDS (None: a
    skew past year 9999 bounds nothing). Later, one record dated 9999 would sit at the top of
    every "last seen" for ever."""
    try:
        return timezone.now() + timedelta(seconds=settings.TELEMETRY_CLOCK_SKEW_SECONDS)
    except OverflowError:
        return None


def store_records(
    *,
    profile: AgentProfile,
    raw_items: Sequence[object],
    batch: bool = True,
    on_commit: Callable[[list[int]], None] | None = None,
    policy: PolicyValues | None = None,
    catalogue: OnceCatalogue | None = None,
    locked: dict[str, AgentSession] | None = None,
    read_requests: Sequence[StoredCall] | None = None,
    metadata: frozenset[int] = frozenset(),
) -> IngestResult:
    """Store the valid, new usage records of one submission for `profile` and re-derive the
    figures they touch. Each item is a JSON object in the shape of `telemetry.schemas.RecordIn`
    (it names its own `session_id`), or a `validation.Typed` record; one bad item never drops
    the others.

    Idempotent on (session, turn, call) — or on `request_id` when given: the same payload again
    is a `duplicate` and changes nothing; different content under a taken key is a `conflict`.
    `batch` prefixes field names with `records.<index>.`. `on_commit` receives the ids of
    sessions that need relief (D4), after commit. `policy` and `catalogue` default to fresh reads.
    `locked`: sessions the caller has already locked in its open transaction
    (`session_state.lock_sessions`, as OTLP does to number turns first), by external id; the
    records' sessions are taken from it instead of being locked a second time, and no savepoint
    is set: the caller's transaction is the unit (an error here rolls all of it back; a
    savepoint cost two round trips an export for a partial rollback no caller makes).
    `read_requests` (with `locked`): the stored calls under every item's (session, request id),
    read by the caller since it locked them (`writers.Submission`).
    `metadata` (with `locked`): sessions whose metadata the caller merged in memory and has yet
    to write; those the writer wrote with their figures come back as `IngestResult.metadata`
    (`writers.Submission`).
    """
    policy = effective_policy(profile) if policy is None else policy
    outcomes, valid = validate_items(
        raw_items, policy=policy, batch=batch, latest_at=latest_accepted_at()
    )
    result = IngestResult(items=[], policy=policy)
    if valid:
        catalogue = OnceCatalogue() if catalogue is None else catalogue
        store = writers.choose(len(valid))
        with transaction.atomic(savepoint=locked is None):
            submission = writers.Submission(
                profile, valid, policy, catalogue, locked, read_requests, metadata
            )
            written = store(submission)
            result.sessions = written.sessions
            result.metadata = written.metadata
            _record_metadata(written, valid)
            _conclude(result, outcomes, written, policy, on_commit)
    result.items = [item for item in outcomes if item is not None]
    return result


def _record_metadata(written: writers.Written, valid: list[ValidRecord]) -> None:
    """The records' `metadata` objects, merged into their sessions (`session_meta`)."""
    if not any(v.record.metadata for v in valid):
        return
    by_id = {s.external_id: s for s in written.sessions}
    found: dict[int, dict[str, str]] = {}
    for v in valid:
        session = by_id.get(v.record.session_id)
        if v.record.metadata and session is not None:
            found.setdefault(session.pk, {}).update(from_record(v.record.metadata))
    record_metadata({s.pk: s for s in written.sessions}, found, "record")


def _conclude(
    result: IngestResult,
    outcomes: list[ItemResult | None],
    written: writers.Written,
    policy: PolicyValues,
    on_commit: Callable[[list[int]], None] | None,
) -> None:
    """The items' outcomes with D8's round signals, and the relief the sessions need (asked
    for after commit)."""
    pk_of = {s.external_id: s.pk for s in written.sessions}
    # each count of rounds' signal asked once (a batch's calls complete a few counts, each many
    # times): `round_signal` is a pure function of it and the policy's limits
    signals: dict[int, RoundSignal] = {}
    for item in written.decided:
        calls = written.turn_calls.get((pk_of[item.session_id or ""], item.turn or 0))
        if calls is not None and item.status in ("created", "duplicate"):
            # D8: the rounds this call completes (its own position in the turn), so a batch of
            # calls 30-45 flags only those at or past the limits.
            rounds = bisect_right(calls, item.call or 0)
            signal = signals.get(rounds)
            if signal is None:
                signal = signals[rounds] = round_signal(
                    rounds, policy.round_soft_limit, policy.round_hard_cap
                )
            item.nudge = policy.nudge_text if signal in ("nudge", "stop") else None
            item.stop = signal == "stop"
        outcomes[item.index] = item
    result.over_threshold = [s.pk for s in result.sessions if needs_relief(s, policy)]
    # listeners (alert rules) evaluate the touched sessions after commit, off this request
    announce_after_commit([s.pk for s in result.sessions])
    if on_commit is not None and result.over_threshold:
        ids = list(result.over_threshold)
        transaction.on_commit(lambda: on_commit(ids))
