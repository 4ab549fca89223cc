"""The knowledge store for compaction archives (D5): a pluggable backend, search, retention.

`COMPACTION_ARCHIVE_BACKEND` names the backend class (dotted path). The default stores archives
in the database with full-text search; `FailingArchive` refuses every write, so tests (and an
operator rehearsing an outage) can see the manual path refuse and the automatic path carry on.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Subquery
from django.utils import timezone
from django.utils.module_loading import import_string

from compaction.log_retention import archived_texts, move_only_copies
from compaction.models import Archive, ArchiveChunk, LogMessage
from compaction.search_terms import (
    Query,
    parse_query,
    postgres_tsquery,
    readable_part,
    searchable,
    snippet_pieces,
    sqlite_match,
)
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_store import effective_policy

CHUNK_CHARS = 64 * 1024 // 4  # ≤ 64 KB even when every character takes four bytes in UTF-8


class ArchiveError(Exception):
    """The archive could not be written; the message says why."""


@dataclass(frozen=True)
class LogEntry:
    seq: int
    role: str
    raw: str


@dataclass(frozen=True)
class ArchiveRequest:
    session: AgentSession
    format: str
    log: Sequence[LogEntry]
    surface_version: int
    surface_body: str


class ArchiveBackend(Protocol):
    def archive(self, request: ArchiveRequest) -> Archive: ...


def log_entries(session: AgentSession, count: int) -> list[LogEntry]:
    """The log's first `count` messages as an archive copies them: each one's text as
    appended, the text log retention removed restored from the archive holding it (so every
    archive holds the whole log before its `log_messages`)."""
    rows = list(
        LogMessage.objects.filter(session=session, seq__lt=count)
        .order_by("seq")
        .values_list("seq", "role", "raw", "removed_at")
    )
    removed = [seq for seq, _, _, at in rows if at is not None]
    restored = archived_texts(session.pk, removed) if removed else {}
    lost = [seq for seq in removed if seq not in restored]
    if lost:
        # never an archive with a message left out or made up: this attempt fails (D5 decides)
        raise ArchiveError(f"the text of log message {lost[0]} is in no archive")
    return [
        LogEntry(seq, role, restored[seq][1] if at is not None else raw)
        for seq, role, raw, at in rows
    ]


def namespace_for(session: AgentSession) -> str:
    """`chat-archive:<profile>:<session_id>` — the knowledge-store namespace of D5."""
    return f"chat-archive:{session.profile.name}:{session.external_id}"


def chunk_text(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """`text` in consecutive parts of at most `size` characters ("" stays one empty part)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def readable_text(raw: str) -> str:
    """Every string in a JSON message (keys of structure excluded), decoded, one per line.

    What full-text search should see: words, not JSON escapes. NUL (which PostgreSQL text
    cannot hold) becomes U+FFFD.
    """
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw.replace("\x00", "\ufffd")
    strings: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            strings.append(node)
        elif isinstance(node, dict):
            for key, item in node.items():
                if key not in _STRUCTURE_KEYS:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(value)
    return "\n".join(strings).replace("\x00", "\ufffd")


# Keys whose values are structure (ids, types, roles), not words anyone searches for.
_STRUCTURE_KEYS = frozenset(
    {"seq", "type", "role", "id", "tool_use_id", "tool_call_id", "signature", "cache_control"}
)


def _chunk_rows(entry: LogEntry) -> Iterator[tuple[int, str, str]]:
    """(part, text, search) of each chunk of one message: its raw JSON and its readable text
    cut alike, the identifier terms added to each search part."""
    raw_parts = chunk_text(entry.raw)
    search_parts = chunk_text(readable_text(entry.raw))
    for part in range(max(len(raw_parts), len(search_parts))):
        yield (
            part,
            raw_parts[part] if part < len(raw_parts) else "",
            searchable(search_parts[part]) if part < len(search_parts) else "",
        )


_CHUNK_COLUMNS = ("archive_id", "seq", "part", "role", "text", "search")


def _write_chunks(archive: Archive, log: Sequence[LogEntry]) -> None:
    """Every chunk of `log` in one statement. On PostgreSQL a COPY, rows streamed as they are
    cut: bulk_create built a model instance and quoted every value of ~10,000 chunks of a 1M-token
    log, and held them all in memory at once (make bench, P6). Elsewhere bulk_create (SQLite's
    FTS5 table is filled by its trigger either way)."""
    rows = (
        (archive.pk, entry.seq, part, entry.role, text, search)
        for entry in log
        for part, text, search in _chunk_rows(entry)
    )
    if connection.vendor != "postgresql":
        ArchiveChunk.objects.bulk_create(
            ArchiveChunk(**dict(zip(_CHUNK_COLUMNS, row, strict=True))) for row in rows
        )
        return
    quote = connection.ops.quote_name
    sql = (
        f"COPY {quote(ArchiveChunk._meta.db_table)} "
        f"({', '.join(quote(c) for c in _CHUNK_COLUMNS)}) FROM STDIN"
    )
    # The raw driver cursor: Django's wrapper has no COPY; its error mapping still applies.
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(sql) as copy,
    ):
        for row in rows:
            copy.write_row(row)


class DatabaseArchive:
    """Archives in this database. Idempotent: the same (session, log length, surface version)
    returns the archive already written (a retried job archives once)."""

    def archive(self, request: ArchiveRequest) -> Archive:
        session = request.session
        existing = Archive.objects.filter(
            session=session, log_messages=len(request.log), surface_version=request.surface_version
        ).first()
        if existing is not None:
            return existing
        try:
            with transaction.atomic():
                archive = Archive.objects.create(
                    session=session,
                    namespace=namespace_for(session),
                    log_messages=len(request.log),
                    surface_version=request.surface_version,
                    surface=request.surface_body,
                    format=request.format,
                    chars=sum(len(entry.raw) for entry in request.log),
                )
                _write_chunks(archive, request.log)
        except IntegrityError:
            # A concurrent attempt archived the same state first; theirs is ours.
            return Archive.objects.get(
                session=session,
                log_messages=len(request.log),
                surface_version=request.surface_version,
            )
        return archive


class FailingArchive:
    """A backend whose store is down: every archive attempt fails."""

    def archive(self, request: ArchiveRequest) -> Archive:
        raise ArchiveError("archive store unavailable (COMPACTION_ARCHIVE_BACKEND=FailingArchive)")


def archive_backend() -> ArchiveBackend:
    backend: ArchiveBackend = import_string(settings.COMPACTION_ARCHIVE_BACKEND)()
    return backend


def archived_messages(archive: Archive) -> list[str]:
    """The archived log's messages in seq order, each the exact JSON text that was appended (its
    chunks joined), as `GET /log` serves it."""
    parts: dict[int, list[str]] = {}
    for seq, text in archive.chunks.order_by("seq", "part").values_list("seq", "text"):
        parts.setdefault(seq, []).append(text)
    return ["".join(texts) for _, texts in sorted(parts.items())]


def _archive_head(archive: Archive) -> dict[str, Any]:
    return {
        "id": archive.pk,
        "namespace": archive.namespace,
        "session_id": archive.session.external_id,
        "profile": archive.session.profile.name,
        "format": archive.format,
        "created_at": archive.created_at.isoformat(),
        "log_messages": archive.log_messages,
        "surface_version": archive.surface_version,
    }


def archive_document(archive: Archive) -> dict[str, Any]:
    """One archive whole, decoded (for the console's viewer): the log as received (each message
    with its seq) and the surface as it was. What is served is `archive_json`."""
    return {
        **_archive_head(archive),
        "log": [json.loads(text) for text in archived_messages(archive)],
        "surface": json.loads(archive.surface),
    }


def archive_json(archive: Archive) -> str:
    """One archive whole as JSON text, `archive_document`'s fields: each log message is its
    stored text and the surface its stored body, never re-encoded, so a message reads back byte
    for byte as appended (escapes, non-ASCII and numbers as written), as from `GET /log`."""
    head = json.dumps(_archive_head(archive), ensure_ascii=True, separators=(",", ":"))
    log = ",".join(archived_messages(archive))
    return f'{head[:-1]},"log":[{log}],"surface":{archive.surface}}}'


def archive_jsonl(archive: Archive) -> str:
    """The archived log as JSON Lines: each message's stored text on a line of its own. A line
    break can only be whitespace between a message's tokens (JSON strings hold none raw); it
    becomes a space, the one change a line-per-message form needs."""
    return "".join(
        text.replace("\r", " ").replace("\n", " ") + "\n" for text in archived_messages(archive)
    )


@dataclass(frozen=True)
class SearchHit:
    archive_id: int
    session_id: str
    namespace: str
    seq: int
    role: str
    snippet: str
    created_at: str
    rank: float = 0.0
    archives: int = 1  # how many of the session's archives hold this message


@dataclass(frozen=True)
class SearchResult:
    """One page of hits, best first, and how many hits the query has in all."""

    hits: list[SearchHit]
    total: int


def search_archives(
    query: str,
    *,
    profile: AgentProfile | None = None,
    session: AgentSession | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[SearchHit]:
    """`search_archives_counted(...).hits`."""
    return search_archives_counted(
        query, profile=profile, session=session, limit=limit, offset=offset
    ).hits


def search_archives_counted(
    query: str,
    *,
    profile: AgentProfile | None = None,
    session: AgentSession | None = None,
    limit: int = 50,
    offset: int = 0,
) -> SearchResult:
    """Full-text search of archived messages, best match first (then newest archive), `limit`
    hits from `offset`, with the total number of hits; snippets of the readable text are safe
    HTML: the text escaped, hits in <mark>…</mark> (archived text is whatever an agent sent,
    `<script>` included).

    Words AND, `OR`, `-word`, `"phrase"`, `prefix*`; identifiers match by their parts
    (`compaction.search_terms`). PostgreSQL: `to_tsquery` over the GIN-indexed tsvector, ranked
    by `ts_rank_cd`; SQLite: FTS5 MATCH ranked by bm25.
    """
    parsed = parse_query(query.strip())
    if parsed.empty:
        return SearchResult([], 0)
    where: list[str] = []
    params: list[int] = []
    if profile is not None:
        where.append("s.profile_id = %s")
        params.append(profile.pk)
    if session is not None:
        where.append("a.session_id = %s")
        params.append(session.pk)
    extra = "".join(f" AND {clause}" for clause in where)
    # A session's archives overlap: each holds the log up to its compaction, so one message (and
    # each part of a long one) is in every later archive too. A hit is a message: (session, seq)
    # once, from its best-ranked part in the newest archive holding it, with how many archives
    # hold it.
    select = (
        "SELECT a.id, s.external_id, a.namespace, c.seq, c.role, c.search, a.created_at, "
        "a.session_id AS session_pk, {rank} AS rank, "
        "ROW_NUMBER() OVER (PARTITION BY a.session_id, c.seq "
        "ORDER BY {rank} DESC, a.created_at DESC, a.id DESC, c.part) AS pick, "
        "DENSE_RANK() OVER (PARTITION BY a.session_id, c.seq ORDER BY a.id) AS nth "
    )
    if connection.vendor == "postgresql":
        inner = (
            select.format(rank="ts_rank_cd(to_tsvector('english', c.search), q)")
            + "FROM compaction_archivechunk c JOIN compaction_archive a ON a.id = c.archive_id "
            "JOIN telemetry_agentsession s ON s.id = a.session_id, "
            "to_tsquery('english', %s) q "
            "WHERE to_tsvector('english', c.search) @@ q" + extra
        )
        args: list[str | int] = [postgres_tsquery(parsed), *params, limit, offset]
    else:
        # bm25 is lower for better matches; negated so both databases rank "higher is better".
        # FTS5 allows bm25() only in a plain query of its table: rank there, join outside.
        inner = (
            select.format(rank="f.score")
            + "FROM (SELECT rowid AS id, -bm25(compaction_archivechunk_fts) AS score "
            "FROM compaction_archivechunk_fts WHERE compaction_archivechunk_fts MATCH %s) f "
            "JOIN compaction_archivechunk c ON c.id = f.id "
            "JOIN compaction_archive a ON a.id = c.archive_id "
            "JOIN telemetry_agentsession s ON s.id = a.session_id WHERE 1 = 1" + extra
        )
        args = [sqlite_match(parsed), *params, limit, offset]
    # (window functions take no DISTINCT: the archives holding a message are its highest nth)
    counted = f"SELECT *, MAX(nth) OVER (PARTITION BY session_pk, seq) AS copies FROM ({inner}) i"
    sql = (
        "SELECT id, external_id, namespace, seq, role, search, created_at, rank, "
        f"COUNT(*) OVER (), copies FROM ({counted}) hit WHERE pick = 1 "
        "ORDER BY rank DESC, created_at DESC, id DESC, seq LIMIT %s OFFSET %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        rows = cursor.fetchall()
    total = rows[0][8] if rows else 0
    if not rows and offset > 0:
        total = search_archives_counted(
            query, profile=profile, session=session, limit=1, offset=0
        ).total
    return SearchResult(
        [
            SearchHit(
                archive_id=row[0],
                session_id=row[1],
                namespace=row[2],
                seq=row[3],
                role=row[4],
                snippet=_safe_snippet(readable_part(row[5]), parsed),
                created_at=row[6].isoformat() if hasattr(row[6], "isoformat") else str(row[6]),
                rank=float(row[7] or 0.0),
                archives=int(row[9]),
            )
            for row in rows
        ],
        total,
    )


def _safe_snippet(text: str, query: Query) -> str:
    """A window around the first hit: every piece escaped, hits wrapped in <mark>, so no
    archived text can inject markup."""
    return "".join(
        f"<mark>{html.escape(piece)}</mark>" if kind == "mark" else html.escape(piece)
        for kind, piece in snippet_pieces(text, query)
    )


def purge_expired_archives(*, batch_size: int = 500) -> tuple[int, bool]:
    """Delete archives older than their profile's `archive_retention_days`, at most `batch_size`
    a call, always keeping each session's newest archive, and every archive that is the only
    copy of a log message's text (issue 35: log retention removed it from the log; the newest
    archive takes over where it holds the text too, `move_only_copies`). Never touches the log's
    text.

    Returns (deleted, has_more) so the periodic job can re-enqueue itself while work remains.
    """
    now = timezone.now()
    newest = Archive.objects.filter(session=OuterRef("session")).order_by("-created_at", "-pk")
    candidates = Archive.objects.exclude(pk=Subquery(newest.values("pk")[:1]))
    only_copy = Exists(
        LogMessage.objects.filter(session=OuterRef("session"), archive=OuterRef("pk"))
    )
    doomed: list[int] = []
    for profile in AgentProfile.objects.filter(sessions__archives__isnull=False).distinct():
        cutoff = now - timedelta(days=effective_policy(profile).archive_retention_days)
        expired = candidates.filter(session__profile=profile, created_at__lt=cutoff)
        move_only_copies(list(expired.filter(only_copy).values_list("pk", flat=True)[:batch_size]))
        ids = expired.exclude(only_copy).values_list("pk", flat=True)
        doomed.extend(ids[: batch_size - len(doomed) + 1])
        if len(doomed) > batch_size:
            break
    has_more = len(doomed) > batch_size
    doomed = doomed[:batch_size]
    if doomed:
        ArchiveChunk.objects.filter(archive_id__in=doomed).delete()
        Archive.objects.filter(pk__in=doomed).delete()
    return len(doomed), has_more
