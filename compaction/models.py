"""Transcript log, materialised surface, compaction operations and runs, archives, overflows.

The log is append-only: rows are inserted by `compaction.transcripts.append_messages` and never
deleted (compaction writes operations, not log rows); the one update is log retention's
(`compaction.log_retention`), which removes the text of a message the surface no longer shows
once an archive holds it, keeping its seq, role, size and digest. Other writes go through their
owners: the surface `compaction.transcripts.store_surface`; runs and operations
`compaction.services` (an agent's own compaction, found by an import: `compaction.imports.store`);
archives `compaction.archives`; import state and session links `compaction.imports.store`.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from telemetry.models import AgentProfile, AgentSession

FORMATS = [("anthropic", "Anthropic Messages"), ("openai", "OpenAI Chat")]


class LogMessage(models.Model):
    """One transcript message exactly as the agent sent it (`raw`: the original JSON text)."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="log")
    seq = models.PositiveIntegerField()
    format = models.CharField(max_length=10, choices=FORMATS)
    role = models.CharField(max_length=16)
    raw = models.TextField()
    # SHA-256 of `raw`: a replay of the same seq is a duplicate only when the bytes match.
    raw_hash = models.CharField(max_length=64)
    chars = models.PositiveBigIntegerField()
    # D6: how many of `chars` are tool results (the rest is prose): the session learns tokens
    # per character of each kind. NULL on messages stored before it was recorded (prose).
    tool_chars = models.PositiveBigIntegerField(null=True, blank=True)
    # D3: the `max_result_chars` in force when this message was appended; the surface bounds
    # its tool results by this, never by a later policy.
    bound_cap = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Log retention (`compaction.log_retention`, its one write): when the text was removed
    # (`raw` is then "") and the archive holding it, which the archive purge keeps while it is
    # the only copy. Both NULL on a message that has its text.
    removed_at = models.DateTimeField(null=True, blank=True)
    archive = models.ForeignKey(
        "Archive",
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="only_copies",
        # the partial index below: a full one would index a NULL per message of every log
        db_index=False,
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="log_unique_seq")]
        indexes = [
            # a session's removed messages and their archives (the viewer, the archive purge)
            models.Index(
                fields=["session", "archive"],
                condition=Q(archive__isnull=False),
                name="log_removed_archive",
            )
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq}"


class Surface(models.Model):
    """The materialised surface of a session: always `derive_surface(log, operations)`.

    `body` is the canonical JSON of the surface messages in the session's format; `version`
    rises with every append and every compaction (D1: same version, same bytes).
    """

    session = models.OneToOneField(AgentSession, on_delete=models.CASCADE, related_name="surface")
    format = models.CharField(max_length=10, choices=FORMATS)
    version = models.PositiveIntegerField(default=0)
    body = models.TextField(default="[]")
    etag = models.CharField(max_length=64, default="")
    chars = models.PositiveBigIntegerField(default=0)
    tokens_estimate = models.PositiveBigIntegerField(default=0)
    messages = models.PositiveIntegerField(default=0)
    log_messages = models.PositiveIntegerField(default=0)
    # Each surface message's seq (the body has none): with it the console reads the stored
    # surface instead of re-deriving it. Empty on rows stored before it was recorded.
    seqs = models.JSONField(default=list)
    # The log this surface follows (`context_core.log_position`): the hash chain of the log's
    # first `log_messages` messages, extended per append. Empty on rows stored before it was.
    log_hash = models.CharField(max_length=64, default="", blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"surface of {self.session_id} v{self.version}"


class SurfaceVersion(models.Model):
    """What produced each surface version: the log length and the operations then in force.

    `derive_surface(log[:log_messages], operations[:operations])` rebuilds the surface of any
    version exactly, so "what did the model see on turn N" is answerable (the turn's calls name
    the version their request used) without storing a body per version.
    """

    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="surface_versions"
    )
    version = models.PositiveIntegerField()
    log_messages = models.PositiveIntegerField()
    operations = models.PositiveIntegerField()
    # The surface's characters at this version (D6: calls that name the version they used fit
    # the session's tokens per char on it). NULL on versions stored before it was recorded.
    chars = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "version"], name="surface_version_unique")
        ]

    def __str__(self) -> str:
        return f"{self.session_id} v{self.version}"


class CompactionRun(models.Model):
    """One compaction attempt, whatever its outcome. Kept forever (metrics are computed here)."""

    class Mode(models.TextChoices):
        MANUAL = "manual", "manual"
        AUTO = "auto", "automatic"
        OVERFLOW = "overflow", "overflow"

    class Status(models.TextChoices):
        RUNNING = "running", "running"
        APPLIED = "applied", "applied"
        NOOP = "noop", "nothing to do"
        REFUSED = "refused", "refused"
        SUPERSEDED = "superseded", "superseded"
        FAILED = "failed", "failed"

    class Action(models.TextChoices):
        """What the planner chose (`context_core.relief_planning.Action`); "" before it ran."""

        NOTHING = "nothing", "nothing"
        PRUNE = "prune", "prune"
        PRUNE_SUMMARIZE = "prune+summarize", "prune, then summarize"

    class EstimateMethod(models.TextChoices):
        """How the size after the run was estimated (`context_core.estimates`); "" if not."""

        FIT = "fit", "the session's least-squares fit"
        RULE = "rule", "measured size − freed chars / 4"

    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="compaction_runs"
    )
    mode = models.CharField(max_length=10, choices=Mode.choices)
    trigger = models.CharField(max_length=200, blank=True, default="")
    requested_by = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.RUNNING)
    action = models.CharField(max_length=20, blank=True, default="", choices=Action.choices)
    reason = models.TextField(blank=True, default="")
    tokens_before = models.BigIntegerField(null=True, blank=True)
    tokens_after = models.BigIntegerField(null=True, blank=True)
    surface_version_before = models.PositiveIntegerField(null=True, blank=True)
    surface_version_after = models.PositiveIntegerField(null=True, blank=True)
    # D6: the next request's estimated size after this run, and how ("fit": the session's
    # least-squares overhead + tokens per char; "rule": the measured size − freed chars // 4).
    estimate_tokens = models.BigIntegerField(null=True, blank=True)
    estimate_method = models.CharField(
        max_length=8, blank=True, default="", choices=EstimateMethod.choices
    )
    archived = models.BooleanField(default=False)
    archive = models.ForeignKey(
        "Archive", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    archive_error = models.TextField(blank=True, default="")
    error = models.TextField(blank=True, default="")
    attempts = models.PositiveIntegerField(default=1)
    task_id = models.CharField(max_length=64, blank=True, default="")
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The session's last turn the server had received when the run was applied (None: none
    # yet). Runs are timed by the server's clock and turns by the agent's, so a chart of turns
    # places a run by this, never by comparing the two clocks.
    turn_received = models.PositiveIntegerField(null=True, blank=True)
    plan_ms = models.PositiveIntegerField(null=True, blank=True)
    # D1 economics as planned (`context_core.economics`): what the next call will re-write,
    # its premium over reading, the saving per later call, the break-even and the horizon; and
    # the passes the worth-it rule skipped ("prune", "summarize").
    rewrite_tokens = models.BigIntegerField(null=True, blank=True)
    rewrite_premium_usd = models.DecimalField(
        max_digits=20, decimal_places=9, null=True, blank=True
    )
    saving_per_call_usd = models.DecimalField(
        max_digits=20, decimal_places=9, null=True, blank=True
    )
    break_even_calls = models.PositiveIntegerField(null=True, blank=True)
    remaining_calls = models.PositiveIntegerField(null=True, blank=True)
    skipped = models.JSONField(default=list, blank=True)
    archive_ms = models.PositiveIntegerField(null=True, blank=True)
    apply_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["session", "-started_at"], name="run_session_started"),
            models.Index(fields=["mode", "status"], name="run_mode_status"),
        ]

    def __str__(self) -> str:
        return f"{self.mode} run {self.pk} of {self.session_id}: {self.status}"


class CompactionOperation(models.Model):
    """One compaction operation of the core (prune or summarize), as JSON, in apply order.

    The unique key (session, base_version, position) is what makes a job that runs twice do the
    work once: two passes planned on the same surface version cannot both be applied.
    """

    class Kind(models.TextChoices):
        PRUNE = "prune", "prune"
        SUMMARIZE = "summarize", "summarize"
        AGENT = "agent", "agent compaction"

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="operations")
    # NULL for an agent's own compaction recorded by a transcript import (no run of ours).
    run = models.ForeignKey(
        CompactionRun, on_delete=models.PROTECT, related_name="operations", null=True, blank=True
    )
    base_version = models.PositiveIntegerField()
    position = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    data = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "base_version", "position"], name="operation_unique_per_version"
            )
        ]
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.kind} of {self.session_id} at v{self.base_version}"


class Archive(models.Model):
    """A copy of the full transcript taken before a compaction changed the surface (D5).

    The log part is stored as searchable chunks (`ArchiveChunk`); `surface` is the surface as it
    was. One archive per (session, log length, surface version): a retried job reuses it.
    """

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="archives")
    namespace = models.CharField(max_length=300, db_index=True)
    log_messages = models.PositiveIntegerField()
    surface_version = models.PositiveIntegerField()
    surface = models.TextField()
    format = models.CharField(max_length=10, choices=FORMATS)
    chars = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "log_messages", "surface_version"], name="archive_unique_state"
            )
        ]
        indexes = [models.Index(fields=["session", "-created_at"], name="archive_session_created")]

    def __str__(self) -> str:
        return f"{self.namespace} @ {self.created_at:%Y-%m-%d %H:%M}"


class ArchiveChunk(models.Model):
    """Up to 64 KB of one archived log message; the unit of full-text search.

    PostgreSQL indexes `to_tsvector(search)` (a tsvector is capped at 1 MB, hence the chunks);
    SQLite mirrors `search` into the FTS5 table `compaction_archivechunk_fts` (see migrations).
    """

    archive = models.ForeignKey(Archive, on_delete=models.CASCADE, related_name="chunks")
    seq = models.PositiveIntegerField()
    part = models.PositiveIntegerField(default=0)
    role = models.CharField(max_length=16)
    # `text`: this part of the message's original JSON (the parts rebuild it byte for byte).
    # `search`: this part of its readable text — every string in it, decoded, so "\nStep" is
    # the word "Step" and "\u00e9" is "é" — which the full-text index covers.
    text = models.TextField()
    search = models.TextField(default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["archive", "seq", "part"], name="chunk_unique_part")
        ]
        ordering = ["archive", "seq", "part"]

    def __str__(self) -> str:
        return f"{self.archive_id}#{self.seq}.{self.part}"


class OverflowEvent(models.Model):
    """An agent's report of a context-length error (D4), once per surface version."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="overflows")
    surface_version = models.PositiveIntegerField()
    recovered = models.BooleanField(default=False)
    run = models.ForeignKey(CompactionRun, null=True, blank=True, on_delete=models.SET_NULL)
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "surface_version"],
                condition=Q(recovered=True),
                name="overflow_once_per_version",
            )
        ]

    def __str__(self) -> str:
        return f"overflow of {self.session_id} at v{self.surface_version}"


class TranscriptImport(models.Model):
    """Where the import of one transcript file stopped (issue 11): the byte offset and line
    after the last imported line, the parser's state there, and digests of the imported prefix
    (a rewritten file changes them and is reported, never imported twice)."""

    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="imports")
    path = models.CharField(max_length=1024)
    format = models.CharField(max_length=20)
    session = models.ForeignKey(
        AgentSession, null=True, blank=True, on_delete=models.SET_NULL, related_name="imports"
    )
    offset = models.BigIntegerField(default=0)
    next_line = models.PositiveIntegerField(default=1)
    head_hash = models.CharField(max_length=64, blank=True, default="")
    tail_hash = models.CharField(max_length=64, blank=True, default="")
    parser_state = models.JSONField(default=dict)
    totals = models.JSONField(default=dict)
    rewritten_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["profile", "path"], name="import_unique_path")
        ]

    def __str__(self) -> str:
        return f"{self.profile_id}:{self.path} @ {self.offset}"


class SessionLink(models.Model):
    """A child session of an imported one: a subagent, an inline sidechain, or the model call
    of the agent's own compaction (Claude Code's `agent-acompact-*`)."""

    class Relation(models.TextChoices):
        SUBAGENT = "subagent", "subagent"
        SIDECHAIN = "sidechain", "sidechain"
        COMPACTION = "compaction", "compaction call"

    parent = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="child_links")
    child = models.OneToOneField(AgentSession, on_delete=models.CASCADE, related_name="parent_link")
    relation = models.CharField(max_length=12, choices=Relation.choices)
    agent_id = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.child_id} {self.relation} of {self.parent_id}"
