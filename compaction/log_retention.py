"""Log retention (issue 35): the text of old transcript messages the surface no longer shows
goes once an archive holds it; the archive is then kept while it is the only copy.

A profile's `log_retention_days` (0, the default: forever) is the age after which a log
message may lose its text. It does only when the pure rule allows it
(`context_core.removable_seqs`): the surface hides it wholly (inside a summary in force, or
before the agent's own cut) and the session's newest archive holds it. The row stays — seq,
role, format, size, `raw_hash` (so the log's hash chain holds and a replay of the same seq is
still a duplicate) — with `raw` emptied, `removed_at` set and `archive` naming the archive
that holds the text. The surface keeps its bytes (the core's property tests); every reader of
the text restores it from that archive (`archived_texts`) or says where it is.

The job is bounded (at most `BATCH_MESSAGES` messages and `BATCH_SESSIONS` sessions a run, the
periodic task re-enqueues itself while there is more) and takes no session lock: it touches
only rows an append never writes again, and an operation can only hide more, never show a
hidden message again. The archive purge (`compaction.archives.purge_expired_archives`) first
moves each removed message to a newer archive that holds it too (`move_only_copies`) and never
deletes an archive that still holds one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from django.db import connection
from django.db.models import Exists, IntegerField, Max, Min, OuterRef, Q, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from compaction.models import Archive, ArchiveChunk, CompactionOperation, LogMessage
from context_core import operation_from_dict, removable_seqs
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_rules import PolicyValues
from telemetry.policy_store import effective_policy
from telemetry.retention import cutoffs

BATCH_MESSAGES: Final = 1000
BATCH_SESSIONS: Final = 200


@dataclass(frozen=True)
class RemovedText:
    messages: int
    sessions: int
    has_more: bool


def candidate_sessions(by_profile: Mapping[int, datetime]) -> Q:
    """Sessions (an `AgentSession` filter on the annotations of `_sessions`) where log
    retention may have work: an archive, and a message older than the profile's cut-off with
    its text, which that archive holds, where an operation may hide it — between the first seq
    a summary starts at and the last it hides, or before the agent's cut (`_hiding_extent`: a
    superset of what `context_core.hidden_seqs` hides, never a smaller one). So a session whose
    old text is all shown (its first request, the rounds kept verbatim) is not looked at every
    run. System prompts are left out of the test too (a summary never starts at one)."""
    if not by_profile:
        return Q(pk__in=[])
    may_hide = Q(seq__gte=OuterRef("span_first"), seq__lte=OuterRef("span_last")) | Q(
        seq__lt=OuterRef("agent_cut")
    )
    old_text = Q()
    for pk, cutoff in by_profile.items():
        old_text |= Q(profile_id=pk) & Q(
            Exists(
                LogMessage.objects.filter(
                    may_hide,
                    session=OuterRef("pk"),
                    removed_at__isnull=True,
                    created_at__lt=cutoff,
                    seq__lt=OuterRef("archived"),
                ).exclude(role="system")
            )
        )
    return Q(archive_pk__isnull=False) & old_text


def _hiding_extent(kind: str, key: str, fold: type[Min] | type[Max]) -> Subquery:
    """The least or greatest `key` of the session's operations of `kind` (NULL: none)."""
    value = Cast(KeyTextTransform(key, "data"), IntegerField())
    return Subquery(
        CompactionOperation.objects.filter(session=OuterRef("pk"), kind=kind)
        .order_by()
        .values("session")
        .annotate(extent=fold(value))
        .values("extent")[:1]
    )


def _sessions(
    by_profile: Mapping[int, datetime], limit: int | None
) -> list[tuple[int, int, int, int]]:
    """(session id, profile id, newest archive id, log messages it holds) of the first `limit`
    candidate sessions (all when None), in id order."""
    newest = Archive.objects.filter(session=OuterRef("pk")).order_by("-created_at", "-pk")
    summarize, agent = CompactionOperation.Kind.SUMMARIZE, CompactionOperation.Kind.AGENT
    return list(
        AgentSession.objects.annotate(
            archive_pk=Subquery(newest.values("pk")[:1]),
            archived=Subquery(newest.values("log_messages")[:1]),
            span_first=_hiding_extent(summarize, "first_seq", Min),
            span_last=_hiding_extent(summarize, "last_seq", Max),
            agent_cut=_hiding_extent(agent, "keep_from_seq", Max),
        )
        .filter(candidate_sessions(by_profile))
        .order_by("pk")
        .values_list("pk", "profile_id", "archive_pk", "archived")[:limit]
    )


def removable(session_id: int, cutoff: datetime, archived: int) -> tuple[int, ...]:
    """The seqs of `session_id`'s messages older than `cutoff` whose text may go now
    (`context_core.removable_seqs` on their seq and role: no text is read)."""
    operations = [
        operation_from_dict(data)
        for data in CompactionOperation.objects.filter(session_id=session_id)
        .order_by("pk")
        .values_list("data", flat=True)
    ]
    rows = (
        LogMessage.objects.filter(
            session_id=session_id, removed_at__isnull=True, created_at__lt=cutoff, seq__lt=archived
        )
        .order_by("seq")
        .values_list("seq", "role")
    )
    return removable_seqs(rows, operations, archived=archived)


def _held(session_id: int, archive_id: int, seqs: Sequence[int]) -> list[int]:
    """Of `seqs`, those whose text `archive_id` holds byte for byte (its parts joined in order
    are the text): nothing is emptied that the archive could not give back. Compared in the
    database, no text comes back. PostgreSQL joins the parts (`STRING_AGG`); SQLite (3.40 has
    no ordered `GROUP_CONCAT`) checks that the parts add up to the text's length and each is
    the text at its offset (the lengths of the parts before it), in characters."""
    if not seqs:
        return []
    log, chunk = (connection.ops.quote_name(m._meta.db_table) for m in (LogMessage, ArchiveChunk))
    marks = ", ".join(["%s"] * len(seqs))
    if connection.vendor == "postgresql":
        sql = (
            f"SELECT m.seq FROM {log} m WHERE m.session_id = %s AND m.seq IN ({marks}) "
            f"AND m.raw = (SELECT STRING_AGG(c.text, '' ORDER BY c.part) FROM {chunk} c "
            "WHERE c.archive_id = %s AND c.seq = m.seq)"
        )
        params = [session_id, *seqs, archive_id]
    else:
        sql = (
            f"SELECT m.seq FROM {log} m WHERE m.session_id = %s AND m.seq IN ({marks}) "
            f"AND LENGTH(m.raw) = (SELECT SUM(LENGTH(c.text)) FROM {chunk} c "
            "WHERE c.archive_id = %s AND c.seq = m.seq) "
            "AND NOT EXISTS (SELECT 1 FROM (SELECT c.seq, c.text, CAST(SUM(LENGTH(c.text)) "
            "OVER (PARTITION BY c.seq ORDER BY c.part) - LENGTH(c.text) AS INTEGER) AS at "
            f"FROM {chunk} c WHERE c.archive_id = %s AND c.seq IN ({marks})) p "
            "WHERE p.seq = m.seq AND SUBSTR(m.raw, p.at + 1, LENGTH(p.text)) <> p.text)"
        )
        params = [session_id, *seqs, archive_id, archive_id, *seqs]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = {seq for (seq,) in cursor.fetchall()}
    return [seq for seq in seqs if seq in found]


def remove_expired_text(
    *,
    batch_messages: int = BATCH_MESSAGES,
    batch_sessions: int = BATCH_SESSIONS,
    now: datetime | None = None,
    policies: Mapping[int, PolicyValues] | None = None,
) -> RemovedText:
    """Remove the text of at most `batch_messages` log messages, looking at most at
    `batch_sessions` sessions. Idempotent: a message loses its text once."""
    now = now or timezone.now()
    if policies is None:
        policies = {p.pk: effective_policy(p) for p in AgentProfile.objects.all()}
    found = cutoffs(policies, now, "log_retention_days")
    removed = looked = 0
    for session_id, profile_id, archive_id, archived in _sessions(found, batch_sessions + 1):
        if looked == batch_sessions or removed >= batch_messages:
            return RemovedText(removed, looked, True)
        looked += 1
        seqs = removable(session_id, found[profile_id], archived)
        taken = seqs[: batch_messages - removed]
        held = _held(session_id, archive_id, taken) if taken else []
        if held:
            removed += LogMessage.objects.filter(
                session_id=session_id, seq__in=held, removed_at__isnull=True
            ).update(raw="", removed_at=now, archive_id=archive_id)
        if len(taken) < len(seqs):
            return RemovedText(removed, looked, True)
    return RemovedText(removed, looked, False)


PREVIEW_SESSIONS: Final = 200


@dataclass(frozen=True)
class ExpiringTexts:
    """What the policy preview says a shorter log retention removes now: `messages` in
    `sessions`, of the first `PREVIEW_SESSIONS` candidate sessions; `more` when there are
    other candidates it did not look at (the figures are then a floor: "at least")."""

    messages: int
    sessions: int
    more: bool


def expiring_texts(
    before: Mapping[int, PolicyValues],
    after: Mapping[int, PolicyValues],
    now: datetime,
    *,
    limit: int | None = None,
) -> ExpiringTexts:
    """The log messages (and sessions) whose text the log retention of `after` removes now and
    that of `before` keeps (the policy preview): the job's own rule on the same rows, counted
    the same way whether or not the text would go (an archive that lost its copy keeps it).
    Bounded like the job: at most `limit` (`PREVIEW_SESSIONS`) candidate sessions are walked,
    in id order; one more is only looked up, to say there are others."""
    limit = PREVIEW_SESSIONS if limit is None else limit
    old = cutoffs(before, now, "log_retention_days")
    # only a shorter retention (a later cut-off) removes more: an unchanged one costs nothing
    new = {
        pk: cutoff
        for pk, cutoff in cutoffs(after, now, "log_retention_days").items()
        if pk not in old or cutoff > old[pk]
    }
    messages = sessions = 0
    found = _sessions(new, limit + 1)
    for session_id, profile_id, _, archived in found[:limit]:
        going = set(removable(session_id, new[profile_id], archived))
        if profile_id in old:
            going -= set(removable(session_id, old[profile_id], archived))
        messages += len(going)
        sessions += bool(going)
    return ExpiringTexts(messages, sessions, len(found) > limit)


def archived_texts(session_id: int, seqs: Iterable[int]) -> dict[int, tuple[int, str]]:
    """For each of `seqs` whose text retention removed: (the archive holding it, the text),
    byte for byte as appended (its archive's parts joined). Seqs with their text are left out."""
    where = dict(
        LogMessage.objects.filter(
            session_id=session_id, seq__in=list(seqs), removed_at__isnull=False
        ).values_list("seq", "archive_id")
    )
    if not where:
        return {}
    by_archive: dict[int, list[int]] = {}
    for seq, archive_id in where.items():
        by_archive.setdefault(archive_id, []).append(seq)
    held = Q(pk__in=[])
    for archive_id, its in by_archive.items():
        held |= Q(archive_id=archive_id, seq__in=its)
    parts: dict[int, list[str]] = {}
    for seq, text in (
        ArchiveChunk.objects.filter(held).order_by("seq", "part").values_list("seq", "text")
    ):
        parts.setdefault(seq, []).append(text)
    return {seq: (where[seq], "".join(parts[seq])) for seq in where if seq in parts}


@dataclass(frozen=True)
class RemovedNote:
    """A session's messages whose text log retention removed: how many, the first, and the
    archive holding the first (what the transcript viewer says)."""

    messages: int
    first_seq: int
    archive_id: int


def removed_note(session_id: int) -> RemovedNote | None:
    """`RemovedNote` of `session_id`, None when no text was removed (one indexed read)."""
    rows = LogMessage.objects.filter(session_id=session_id, archive__isnull=False)
    first = rows.order_by("seq").values_list("seq", "archive_id").first()
    if first is None:
        return None
    return RemovedNote(rows.count(), first[0], first[1])


def removed_seqs(session_id: int, seqs: Iterable[int]) -> dict[int, int]:
    """Of `seqs`, those whose text retention removed, with the archive holding it."""
    return dict(
        LogMessage.objects.filter(
            session_id=session_id, seq__in=list(seqs), removed_at__isnull=False
        ).values_list("seq", "archive_id")
    )


def move_only_copies(expired: Sequence[int]) -> None:
    """Before the archives `expired` are purged: each removed message whose text one of them
    holds moves to its session's newest archive when that archive holds the text too (it
    holds every message before its `log_messages`: copied from the log, or for a removed
    message from its archive: `compaction.archives.log_entries`). An archive still holding a
    removed message's text after this is its only copy: the purge keeps it."""
    if not expired:
        return
    doomed = set(expired)
    sessions = set(Archive.objects.filter(pk__in=doomed).values_list("session_id", flat=True))
    for session_id in sessions:
        newest = (
            Archive.objects.filter(session_id=session_id)
            .order_by("-created_at", "-pk")
            .values_list("pk", "log_messages")
            .first()
        )
        if newest is None or newest[0] in doomed:
            continue
        moving = list(
            LogMessage.objects.filter(
                session_id=session_id, archive_id__in=doomed, seq__lt=newest[1]
            ).values_list("seq", flat=True)
        )
        held = _held_copies(session_id, newest[0], moving)
        LogMessage.objects.filter(session_id=session_id, seq__in=held).update(archive_id=newest[0])


def _held_copies(session_id: int, archive_id: int, seqs: Sequence[int]) -> list[int]:
    """Of `seqs` (removed messages of `session_id`), those `archive_id` holds byte for byte
    like the archive holding each now: the same parts, each with the same text (both cut by
    `compaction.archives.chunk_text`; a copy cut otherwise is not taken, and the older archive
    is then kept: never a loss). Compared in the database, no text comes back."""
    if not seqs:
        return []
    log, chunk = (connection.ops.quote_name(m._meta.db_table) for m in (LogMessage, ArchiveChunk))
    marks = ", ".join(["%s"] * len(seqs))
    sql = (
        f"SELECT m.seq FROM {log} m WHERE m.session_id = %s AND m.seq IN ({marks}) "
        "AND m.archive_id IS NOT NULL "
        f"AND (SELECT COUNT(*) FROM {chunk} n WHERE n.archive_id = %s AND n.seq = m.seq) "
        f"= (SELECT COUNT(*) FROM {chunk} o WHERE o.archive_id = m.archive_id AND o.seq = m.seq) "
        f"AND EXISTS (SELECT 1 FROM {chunk} n WHERE n.archive_id = %s AND n.seq = m.seq) "
        f"AND NOT EXISTS (SELECT 1 FROM {chunk} n WHERE n.archive_id = %s AND n.seq = m.seq "
        f"AND NOT EXISTS (SELECT 1 FROM {chunk} o WHERE o.archive_id = m.archive_id "
        "AND o.seq = m.seq AND o.part = n.part AND o.text = n.text))"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [session_id, *seqs, archive_id, archive_id, archive_id])
        found = {seq for (seq,) in cursor.fetchall()}
    return [seq for seq in seqs if seq in found]
