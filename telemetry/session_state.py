"""Session state, one owner: every write to an `AgentSession`'s state goes through this module.

It owns the projection of the next request (D6), its pressure, what a compaction's result does
to them, the surface version the transcript log reached, claiming and releasing relief (one
pending job per session, D4), and the needs-relief rule. Ingest, the transcript log, the
compaction services and the sweeper all call these functions; none of them writes a session
row itself. The session's context events (`telemetry.events`) are telemetry-owned as well.

Telemetry never imports compaction: what the projection needs from the transcript log (the
tokens appended after a reply, at the session's learned rates) comes through a port that
compaction registers when its app is ready (`register_log_appended_tokens`, D6).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from context_core import next_call_crosses
from telemetry.catalogue import CatalogueWindows
from telemetry.ingest.statements import Statement, run, vendor
from telemetry.ingest.upserts import (
    lock_keys,
    update_rows,
    update_statement,
)
from telemetry.ingest.values import column_array
from telemetry.models import AgentProfile, AgentSession, ContextEvent, LLMCall, Turn
from telemetry.policy_effects import ProfileSetting, SessionFacts, recomputed_figures
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy
from telemetry.pressure import (
    PressureBand,
    estimate_tokens,
    pressure_band,
    pressure_or_unknown,
    projected_next_request,
)
from telemetry.session_meta import Door, columns, merge
from telemetry.windows import LearnedWindow, WindowInForce

# The figures ingest re-derives from a session's turns, plus the projection they imply.
FIGURE_FIELDS: Final = [
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
_PROJECTION_FIELDS: Final = ["surface_estimate_tokens", "projected_tokens", "pressure"]
# What a metadata merge sets (`merge_metadata`): the merged metadata, its doors, and the indexed
# columns made from it (`session_meta.columns`, by their field names).
_METADATA_JSON: Final = ("metadata", "metadata_doors")
_METADATA_COLUMNS: Final = tuple(columns({}))
METADATA_FIELDS: Final = [*_METADATA_JSON, *_METADATA_COLUMNS]
_FIGURES_AND_METADATA: Final = [*FIGURE_FIELDS, *METADATA_FIELDS]


# --- the port to the transcript log (registered by compaction, D6) ---------------------------

LogAppendedTokens = Callable[[int, int], "int | None"]
"""(session id, surface version) -> estimated tokens of what the log holds after that
version's reply (tool results and prose at the session's learned rates), or None when the log
has no record of that version."""

_log_appended_tokens: LogAppendedTokens | None = None


def register_log_appended_tokens(provider: LogAppendedTokens | None) -> None:
    """Install what the projection asks the transcript log (compaction's `AppConfig.ready`).

    One provider at a time; None unregisters (a telemetry-only deployment, or a test).
    """
    global _log_appended_tokens
    _log_appended_tokens = provider


def registered_log_appended_tokens() -> LogAppendedTokens | None:
    return _log_appended_tokens


# --- sessions -------------------------------------------------------------------------------


_SESSION_KEY = ("profile_id", "external_id")


def lock_sessions(profile: AgentProfile, external_ids: set[str]) -> dict[str, AgentSession]:
    """Create the sessions that do not exist yet and lock all of them, by external id.

    Locks are taken in one order (external id on PostgreSQL's one-statement upsert,
    `upserts.lock_keys`; id elsewhere), so concurrent batches on the same sessions serialise without deadlock.
    """
    ordered = sorted(external_ids)
    rows = lock_keys(AgentSession, [(profile.pk, eid) for eid in ordered], _SESSION_KEY)
    if rows is None:
        wanted = [AgentSession(profile=profile, external_id=eid) for eid in ordered]
        AgentSession.objects.bulk_create(wanted, ignore_conflicts=True)
        # (SQLite has no row locks; its IMMEDIATE transactions already serialise writers.)
        rows = list(
            AgentSession.objects.select_for_update()
            .filter(profile=profile, external_id__in=external_ids)
            .order_by("pk")
        )
    found = {}
    for row in rows:
        row.profile = profile  # the caller's instance: the payload reads it without a query
        found[row.external_id] = row
    return found


def get_or_create_session(profile: AgentProfile, external_id: str) -> AgentSession:
    """The profile's session `external_id`, created when new (a transcript may come first).

    Two first requests racing to create it both get the one row.
    """
    try:
        with transaction.atomic():
            session, _ = AgentSession.objects.get_or_create(
                profile=profile, external_id=external_id
            )
    except IntegrityError:
        session = AgentSession.objects.get(profile=profile, external_id=external_id)
    session.profile = profile
    return session


def restore_session(
    profile: AgentProfile, external_id: str, values: Mapping[str, Any]
) -> tuple[AgentSession, bool]:
    """An imported session (`compaction.session_import`), locked until the end of the caller's
    transaction: the stored one unchanged if it exists (its figures already count every call it
    ever had; retention keeps them), else a new one with the exported `values` (its figures,
    `created_at` included) and True."""
    existing = (
        AgentSession.objects.select_for_update()
        .filter(profile=profile, external_id=external_id)
        .first()
    )
    if existing is not None:
        existing.profile = profile
        return existing, False
    fields = dict(values)
    created_at = fields.pop("created_at", None)
    session = AgentSession.objects.create(profile=profile, external_id=external_id, **fields)
    if created_at is not None:  # auto_now_add stamped the import's time
        AgentSession.objects.filter(pk=session.pk).update(created_at=created_at)
        session.created_at = created_at
    return session, True


def cover_restored(session_id: int, latest: datetime) -> None:
    """Raise the session's `last_seen_at` to `latest`, the time of a restored call or turn, when
    it is earlier or unset: no stored call or turn is later than its session's last sighting
    (`telemetry.session_scope`), whatever an imported file says."""
    AgentSession.objects.filter(
        Q(last_seen_at__isnull=True) | Q(last_seen_at__lt=latest), pk=session_id
    ).update(last_seen_at=latest)


def lock_session(session_id: int) -> None:
    """Lock the session row until the end of the caller's transaction: one writer at a time."""
    AgentSession.objects.select_for_update().filter(pk=session_id).first()


def set_surface_version(session_id: int, version: int) -> None:
    """The transcript log's surface reached `version` (the caller holds the session lock)."""
    AgentSession.objects.filter(pk=session_id).update(surface_version=version)


def write_figures(sessions: list[AgentSession]) -> None:
    """Write the re-derived figures and projection of `sessions` in one statement."""
    update_rows(AgentSession, sessions, list(FIGURE_FIELDS))


def figures_statement(
    sessions: list[AgentSession], merged: Collection[int] = ()
) -> Statement | None:
    """`write_figures`' statement on PostgreSQL, not yet run (`statements.run_together`); None
    elsewhere (call `write_figures`) or for no sessions.

    `merged`: the ids of sessions whose metadata a merge changed in memory and nobody has
    written yet (`merge_metadata`). When one of `sessions` is among them, the statement sets
    every session's `METADATA_FIELDS` beside its figures: one UPDATE of the rows, where a
    second one (`write_merged`) made each a second row version and its index entries. The
    other sessions' metadata is written as it was read, the same values: the caller holds
    them locked since it read them (tests/db/test_session_names.py)."""
    names = FIGURE_FIELDS
    if merged and any(session.pk in merged for session in sessions):
        names = _FIGURES_AND_METADATA
    return update_statement(AgentSession, sessions, names)


# --- projection and pressure (D6) -----------------------------------------------------------


def session_pressure(
    projected: int | None, window: int | None, policy: PolicyValues
) -> float | None:
    """Pressure of `projected` tokens in `window`, or None when either is unknown or the window
    leaves no room beyond the reserved output (refused when a profile or record is saved)."""
    return pressure_or_unknown(projected, window, policy.reserved_output_tokens)


def session_projection(session: AgentSession, last: Turn) -> int:
    """D6: the surface estimate after a compaction, else the latest call + reply + appended.

    The appended tokens are the record's `appended_chars` at chars // 4 when the agent sent it
    (its kinds are unknown), else what the transcript log holds after that call's reply at the
    session's learned rates (asked through the registered port).
    """
    if session.surface_estimate_tokens is not None:
        return session.surface_estimate_tokens
    appended = last.last_call_appended_chars
    tokens = estimate_tokens(appended or 0)
    if appended is None and last.surface_version is not None and _log_appended_tokens:
        found = _log_appended_tokens(session.pk, last.surface_version)
        tokens = 0 if found is None else int(found)
    return projected_next_request(
        context_tokens=last.last_call_context_tokens,
        output=last.last_call_output,
        reasoning_output=last.last_call_reasoning_output,
        appended_tokens=tokens,
    )


def project(session: AgentSession, last: Turn, policy: PolicyValues) -> None:
    """Set the session's projected next request and its pressure (in memory; see callers)."""
    session.projected_tokens = session_projection(session, last)
    session.pressure = session_pressure(session.projected_tokens, session.window_tokens, policy)


def apply_usage_report(
    session: AgentSession,
    last: Turn,
    *,
    window: WindowInForce | None,
    new_report: bool,
    policy: PolicyValues,
) -> None:
    """After ingest re-derived the figures: the window in force, then the projection (in memory;
    `write_figures` stores them). D6: a new usage report supersedes the surface estimate left
    by a compaction; a duplicate changes nothing."""
    if new_report:
        session.surface_estimate_tokens = None
    session.window_tokens = window.tokens if window else None
    session.window_source = window.source if window else ""
    project(session, last, policy)


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
        project(session, last, policy)
        session.save(update_fields=_PROJECTION_FIELDS)
    # The append just made is the best guess of the next round's size (proactive relief).
    return session if needs_relief(session, policy, growth_tokens=appended_tokens) else None


def record_learned_window(session_id: int, tokens: int) -> None:
    """An overflow error stated the limit (D4): remember it for the session's current model and
    put it in force unless the agent reports its own window; then re-project the pressure."""
    with transaction.atomic():
        locked = AgentSession.objects.select_for_update().get(pk=session_id)
        locked.learned_window_tokens = tokens
        locked.learned_window_model = locked.model
        fields = ["learned_window_tokens", "learned_window_model"]
        if locked.window_source != "record":
            locked.window_tokens = tokens
            locked.window_source = "overflow"
            fields += ["window_tokens", "window_source"]
        locked.save(update_fields=fields)
    refresh_projection(session_id)


RECOMPUTE_BATCH: Final = 500
_RECOMPUTED_FIELDS: Final = ["window_tokens", "window_source", "pressure"]


def recompute_pressure_batch(
    profile_id: int, *, after: str = "", limit: int = RECOMPUTE_BATCH
) -> str | None:
    """Recompute the window in force and the pressure of the profile's next `limit` sessions
    (by external id, after `after`) under its policy and windows as stored now, with the rules
    ingest applies (`telemetry.policy_effects.recomputed_figures`); the projection is kept.

    Returns the last external id when more sessions may follow, None when done. The batch is
    locked in external-id order, the order ingest locks sessions in (`lock_sessions`), so the
    two never deadlock; rows whose figures already agree are not written, so a second run
    writes nothing (idempotent). A profile deleted meanwhile is done."""
    profile = AgentProfile.objects.filter(pk=profile_id).first()
    if profile is None:
        return None
    setting = ProfileSetting(effective_policy(profile), dict(profile.window_overrides or {}))
    catalogue = CatalogueWindows()
    with transaction.atomic():
        rows = list(
            AgentSession.objects.select_for_update()
            .filter(profile_id=profile_id, external_id__gt=after)
            .order_by("external_id")[:limit]
        )
        changed = []
        for row in rows:
            figures = recomputed_figures(_facts(row), setting, catalogue.of(row.model))
            window = figures.window
            tokens, source = (window.tokens, window.source) if window else (None, "")
            if (row.window_tokens, row.window_source, row.pressure) != (
                tokens,
                source,
                figures.pressure,
            ):
                row.window_tokens, row.window_source = tokens, source
                row.pressure = figures.pressure
                changed.append(row)
        update_rows(AgentSession, changed, list(_RECOMPUTED_FIELDS))
    return rows[-1].external_id if len(rows) == limit else None


def _facts(row: AgentSession) -> SessionFacts:
    learned = (
        LearnedWindow(row.learned_window_model, row.learned_window_tokens)
        if row.learned_window_tokens is not None
        else None
    )
    return SessionFacts(
        session_id=row.pk,
        profile_id=row.profile_id,
        model=row.model,
        projected_tokens=row.projected_tokens,
        window_tokens=row.window_tokens,
        window_source=row.window_source,
        learned=learned,
        pressure=row.pressure,
        has_transcript=row.surface_version > 0,
        has_calls=row.calls_count > 0,
        external_id=row.external_id,
        agent=row.agent_name,
    )


def record_compaction_result(
    session: AgentSession, *, tokens_after: int, policy: PolicyValues
) -> None:
    """D6: after a compaction the surface estimate replaces the stale projection until the next
    real usage report (ingest then drops it). `session` is re-read first, then saved."""
    session.refresh_from_db()
    session.surface_estimate_tokens = tokens_after
    session.projected_tokens = tokens_after
    session.pressure = session_pressure(tokens_after, session.window_tokens, policy)
    session.save(update_fields=_PROJECTION_FIELDS)


def cache_savings(session: AgentSession) -> Decimal | None:
    """What the prompt cache saved the session: its cost without cache minus its cost (negative
    when cache writes cost more than reads saved); None while either is unknown."""
    if session.no_cache_cost_usd is None or session.cost_usd is None:
        return None
    return session.no_cache_cost_usd - session.cost_usd


def session_band(session: AgentSession, policy: PolicyValues) -> PressureBand:
    return pressure_band(session.pressure, policy.prune_threshold, policy.summarize_threshold)


# --- relief (D4) ----------------------------------------------------------------------------


def needs_relief(session: AgentSession, policy: PolicyValues, *, growth_tokens: int = 0) -> bool:
    """At or above the prune threshold — or, below it, when one more round of `growth_tokens`
    would cross the window (proactive relief) — with a transcript log to relieve, not yet tried
    at this surface version (D4). `needing_relief` is the threshold rule as a query (the sweeper
    does not know a session's growth)."""
    if session.pressure is None or session.surface_version <= 0:
        return False
    if session.relief_tried_version == session.surface_version:
        return False
    if session.pressure >= policy.prune_threshold:
        return True
    window = session.window_tokens
    return (
        session.projected_tokens is not None
        and window is not None
        and next_call_crosses(
            session.projected_tokens,
            growth_tokens=growth_tokens,
            budget_tokens=window - policy.reserved_output_tokens,
        )
    )


def needing_relief(prune_threshold: float) -> Q:
    """`needs_relief` as a filter on `AgentSession` for one profile's threshold."""
    return Q(pressure__gte=prune_threshold, surface_version__gt=0) & ~Q(
        relief_tried_version=F("surface_version")
    )


def claim_relief(session_id: int) -> bool:
    """Claim the session's one pending relief job; False when a job is already pending."""
    claimed = AgentSession.objects.filter(pk=session_id, relief_requested_at__isnull=True).update(
        relief_requested_at=timezone.now()
    )
    return bool(claimed)


def hold_relief(session_ids: Iterable[int]) -> None:
    """Sessions nobody is served from (imported transcripts): claim their relief, so requests
    made later in this transaction claim nothing, and mark the current surface version tried,
    so the sweeper leaves it alone. The caller releases the claim after commit."""
    AgentSession.objects.filter(pk__in=list(session_ids)).update(
        relief_requested_at=timezone.now(), relief_tried_version=F("surface_version")
    )


def release_relief(session_ids: Iterable[int]) -> None:
    """The pending job ended (or was never sent): the session may be claimed again."""
    AgentSession.objects.filter(pk__in=list(session_ids)).update(relief_requested_at=None)


def give_up_relief(session_id: int) -> None:
    """A relief job gave up: release its claim and mark the current surface version tried, so
    neither ingest nor the sweeper asks again until the log changes."""
    AgentSession.objects.filter(pk=session_id).update(
        relief_requested_at=None, relief_tried_version=F("surface_version")
    )


def discard_unused_sessions(session_ids: Iterable[int]) -> None:
    """Delete the given sessions that hold no call and no context event (opened by a request
    none of whose records were kept). The calls and events are read by these sessions' ids,
    not joined to the session rows (`telemetry.session_scope`)."""
    ids = list(session_ids)
    held = LLMCall.objects.filter(session_id__in=ids).values("session_id")
    noted = ContextEvent.objects.filter(session_id__in=ids).values("session_id")
    AgentSession.objects.filter(pk__in=ids).exclude(pk__in=held).exclude(pk__in=noted).delete()


def mark_relief_tried(session_id: int, surface_version: int) -> None:
    """Automatic relief ran at `surface_version`: not again until the surface changes (D4)."""
    AgentSession.objects.filter(pk=session_id).update(relief_tried_version=surface_version)


def record_metadata(
    sessions: Mapping[int, AgentSession], incoming: Mapping[int, dict[str, str]], door: Door
) -> None:
    """Merge what `door` said about each session (by pk) into its metadata and columns
    (`merge_metadata`) and write the sessions it changed (`write_merged`)."""
    write_merged(merge_metadata(sessions, incoming, door))


def merge_metadata(
    sessions: Mapping[int, AgentSession], incoming: Mapping[int, dict[str, str]], door: Door
) -> dict[int, dict[str, Any]]:
    """Merge what `door` said about each session (by pk) into its metadata and columns
    (`telemetry.session_meta.merge`), in memory: the values of `METADATA_FIELDS` of each
    session it changed, by pk, for `write_merged` (or `figures_statement`) to write. A session
    whose metadata does not change is not among them."""
    changed: dict[int, dict[str, Any]] = {}
    for pk, found in incoming.items():
        session = sessions[pk]
        merged = merge(session.metadata or {}, session.metadata_doors or {}, found, door)
        if merged is None:
            continue
        session.metadata, session.metadata_doors = merged
        fields = columns(session.metadata)
        for name, value in fields.items():
            setattr(session, name, value)
        changed[pk] = {
            "metadata": session.metadata,
            "metadata_doors": session.metadata_doors,
            **fields,
        }
    return changed


def write_merged(changed: Mapping[int, dict[str, Any]]) -> None:
    """Write `merge_metadata`'s values: sessions that end with the same values (an export's
    new sessions of one service) by one statement."""
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for pk, values in changed.items():
        key = json.dumps(values, sort_keys=True)
        groups.setdefault(key, (values, []))[1].append(pk)
    for values, pks in groups.values():
        write_metadata(pks, values)


def write_metadata(pks: list[int], values: dict[str, Any]) -> None:
    """Set the sessions `pks`' metadata, its doors and its columns (`session_meta.columns`) to
    `values`: on PostgreSQL one fixed statement whose text never varies (the ORM compiled its
    `update` on every export that named a new session), elsewhere the ORM's `update`. The same
    rows either way (tests/db/test_session_names.py)."""
    if vendor() != "postgresql":
        AgentSession.objects.filter(pk__in=pks).update(**values)
        return
    params: list[Any] = [json.dumps(values[name]) for name in _METADATA_JSON]
    params += [values[name] for name in _METADATA_COLUMNS]
    # Planned for its ids each time, not prepared: a connection kept the generic plan made while
    # the table was small, a scan of every session, however the table grew after (an export's
    # new sessions, tests/db/test_session_names.py).
    run(_write_metadata_sql(), [*params, column_array(tuple(pks))], prepare=False)


@functools.cache
def _write_metadata_sql() -> str:
    quote = connection.ops.quote_name
    by_name = {f.name: f for f in AgentSession._meta.concrete_fields}
    sets = [f"{quote(by_name[name].column)} = %s::jsonb" for name in _METADATA_JSON]
    sets += [f"{quote(by_name[name].column)} = %s::text" for name in _METADATA_COLUMNS]
    return (
        f"UPDATE {quote(AgentSession._meta.db_table)} SET {', '.join(sets)} "
        f"WHERE {quote(AgentSession._meta.pk.column)} = ANY(%s::bigint[])"
    )
