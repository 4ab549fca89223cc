"""What every ingest writer (`telemetry.ingest.writers`) takes and returns, and the steps they
share: lock the sessions, decide each record (created / duplicate / conflict), bring the
sessions' figures forward, and send the transaction's last writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from telemetry import session_state
from telemetry.catalogue import OnceCatalogue
from telemetry.derivation import advance_session_figures, derive_session_figures
from telemetry.idempotency import StoredCall, StoredKeys
from telemetry.ingest import statements
from telemetry.models import AgentProfile, AgentSession, Turn
from telemetry.policy_rules import PolicyValues
from telemetry.validation import ItemResult, ValidRecord
from telemetry.window_resolution import resolve_window


@dataclass(frozen=True, slots=True)
class Submission:
    """The valid records of one submission for `profile`, with what storing them reads.
    `locked`: sessions the caller already holds locked in its transaction, by external id.
    `read_requests`: the stored calls under every record's (session, request id), read by the
    caller in this transaction since it locked their sessions (`locked`), so no other writer
    can have stored one since (OTLP reads them to number its calls); `read_keys` then reads
    only the calls at the records' positions. None: it reads both.
    `metadata`: the ids of sessions of `locked` whose metadata the caller merged in memory and
    has yet to write (`session_state.merge_metadata`); the batch writer writes those of its
    sessions with their figures (`write_last`) and says which (`Written.metadata`)."""

    profile: AgentProfile
    valid: Sequence[ValidRecord]
    policy: PolicyValues
    catalogue: OnceCatalogue
    locked: dict[str, AgentSession] | None
    read_requests: Sequence[StoredCall] | None = None
    metadata: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Written:
    """What a writer stored: the submission's sessions with their new figures, each record's
    outcome (without D8's signals), and the call numbers of each touched (session, turn)."""

    sessions: list[AgentSession]
    decided: list[ItemResult]
    turn_calls: dict[tuple[int, int], list[int]]
    # the sessions of `Submission.metadata` whose metadata was written with their figures
    metadata: frozenset[int] = frozenset()


Writer = Callable[[Submission], Written]


def sessions_of(sub: Submission) -> dict[str, AgentSession]:
    """The submission's sessions, locked: the caller's when it holds them all, else created
    where new and locked here (`session_state.lock_sessions`)."""
    wanted = {v.record.session_id for v in sub.valid}
    if sub.locked is not None and wanted <= sub.locked.keys():
        return {eid: sub.locked[eid] for eid in wanted}
    return session_state.lock_sessions(sub.profile, wanted)


def merged_of(sub: Submission, sessions: dict[str, AgentSession]) -> frozenset[int]:
    """The sessions of `sub.metadata` among `sessions` (`sessions_of`) that are the caller's
    own objects (`Submission.locked`), the ones holding the merged metadata."""
    if not sub.metadata or sub.locked is None:
        return frozenset()
    locked = sub.locked
    return frozenset(
        s.pk for eid, s in sessions.items() if s.pk in sub.metadata and locked.get(eid) is s
    )


def read_keys(sub: Submission, pk_of: dict[str, int]) -> StoredKeys:
    """The stored keys the records may collide with (one read; of their positions alone when
    the caller read the calls under their request ids, `Submission.read_requests`)."""
    valid = sub.valid
    positions = {(pk_of[v.record.session_id], v.record.turn) for v in valid}
    if sub.read_requests is not None:
        return StoredKeys(positions, (), read=sub.read_requests)
    return StoredKeys(
        positions,
        {
            (pk_of[v.record.session_id], v.record.request_id)
            for v in valid
            if v.record.request_id is not None
        },
    )


def decide(
    keys: StoredKeys, valid: Sequence[ValidRecord], pk_of: dict[str, int]
) -> tuple[list[ItemResult], list[ValidRecord]]:
    """Each record's outcome, in order, and the new records (`StoredKeys.decide`: a later record
    under a key an earlier one reserved is its duplicate or conflict)."""
    decided: list[ItemResult] = []
    created: list[ValidRecord] = []
    for v in valid:
        record = v.record
        status, name, detail = keys.decide(pk_of[record.session_id], record, v.payload_hash)
        # positional, in the fields' order: seven keywords cost more, per record of a batch
        decided.append(
            ItemResult(v.index, status, record.session_id, record.turn, record.call, name, detail)
        )
        if status == "created":
            created.append(v)
    return decided, created


def touched(decided: list[ItemResult], pk_of: dict[str, int]) -> set[tuple[int, int]]:
    """The (session, turn) pairs whose calls the items' answers report (D8)."""
    return {
        (pk_of[d.session_id or ""], d.turn or 0)
        for d in decided
        if d.status in ("created", "duplicate")
    }


def refresh_sessions(
    sub: Submission,
    sessions: dict[str, AgentSession],
    created_in: set[int],
    changed: dict[int, tuple[Turn, dict[str, Any]]] | None,
) -> list[AgentSession]:
    """Bring the figures of `sessions` up to date: from what the turn derivation changed where
    it can (`advance_session_figures`: no read of the session's other turns), else re-derived
    from all their turns (one more read). Written by `write_last`."""
    rows = list(sessions.values())
    by_pk = {s.pk: s for s in rows}
    last_turns, rest = advance_session_figures(rows, changed) if changed else ({}, rows)
    if rest:
        last_turns.update(derive_session_figures(rest))
    for pk, last in last_turns.items():
        session_state.apply_usage_report(
            by_pk[pk],
            last,
            window=resolve_window(sub.profile, last, sub.catalogue.price, by_pk[pk]),
            new_report=pk in created_in,
            policy=sub.policy,
        )
    return rows


def write_last(
    sessions: list[AgentSession],
    hours: statements.Statement | None,
    *,
    version: bool = False,
    metadata: frozenset[int] = frozenset(),
) -> str | None:
    """PostgreSQL: the session figures and the hour rows, the transaction's last writes, as one
    statement, with the COMMIT in the same round trip when the caller's block is the outermost
    (`statements.commit_with_last`; docs/performance.md). Last because every batch of a profile
    adds to the same hour rows and holds their locks until it commits. `version`: the session
    row's new `xmin` (`telemetry.ingest.known_sessions`). `metadata`: sessions whose merged
    metadata is written with their figures (`session_state.figures_statement`)."""
    figures = session_state.figures_statement(sessions, metadata)
    return statements.run_together(
        [figures, hours], commit=statements.commit_with_last(), version=version
    )
