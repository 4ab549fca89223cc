"""Agent profiles, their keys and policy, and the worker heartbeat.

Writes go through the services (`telemetry.keys`, `telemetry.policy_store`), never a raw `.save()`
elsewhere: one write path per action.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from telemetry.pressure import hit_ratio
from telemetry.usage_forms import usage_as_sent
from telemetry.windows import SOURCE_LABELS

PROFILE_NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,62}$"


class AgentProfile(models.Model):
    """A group of agents that shares one policy (e.g. `default`, `fleet`, `desktop`)."""

    name = models.CharField(
        max_length=63,
        unique=True,
        validators=[
            RegexValidator(
                PROFILE_NAME_RE,
                "Use lowercase letters, digits, '-' and '_' (at most 63, starting alphanumeric).",
            )
        ],
    )
    description = models.CharField(max_length=500, blank=True, default="")
    # Per-profile context windows by model id or family (e.g. {"claude-sonnet-4-5": 1000000} for
    # the 1M beta) and a profile default under "*"; see `telemetry.windows` for the order.
    window_overrides = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AgentKey(models.Model):
    """An API key bound to one profile. Only a SHA-256 of the key is stored.

    The key has the form `clc_<prefix>_<secret>`; the prefix is stored in clear to find the row,
    and the digest of the whole key is compared in constant time. 256 bits of secret make a
    plain hash sufficient (no password stretching needed) and keep keys valid across a rotation
    of DJANGO_SECRET_KEY.
    """

    SCOPE_INGEST = "ingest"
    SCOPE_COMPACT = "compact"
    SCOPES = (SCOPE_INGEST, SCOPE_COMPACT)

    profile = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="keys")
    name = models.CharField(max_length=200, blank=True, default="")
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"clc_{self.prefix}_… ({self.profile.name})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes


class Policy(models.Model):
    """Policy values: one global row (`is_global`) and optional per-profile override rows.

    On an override row a NULL field inherits the global value. Validation of the merged result
    lives in the pure `telemetry.policy_rules` module; `telemetry.policy_store` is the one write path.
    """

    is_global = models.BooleanField(default=False)
    profile = models.OneToOneField(
        AgentProfile, null=True, blank=True, on_delete=models.CASCADE, related_name="policy"
    )
    # On override rows NULL means "inherit the global value", which "" could not say.
    cache_ttl = models.CharField(  # noqa: DJ001
        max_length=2, null=True, blank=True, choices=[("5m", "5 minutes"), ("1h", "1 hour")]
    )
    prune_threshold = models.FloatField(null=True, blank=True)
    summarize_threshold = models.FloatField(null=True, blank=True)
    relief_hysteresis = models.FloatField(null=True, blank=True)
    keep_rounds = models.IntegerField(null=True, blank=True)
    keep_rounds_verbatim = models.IntegerField(null=True, blank=True)
    stub_head_chars = models.IntegerField(null=True, blank=True)
    stub_tail_chars = models.IntegerField(null=True, blank=True)
    max_result_chars = models.IntegerField(null=True, blank=True)
    prune_min_free_tokens = models.IntegerField(null=True, blank=True)
    prune_exclude_tools = models.JSONField(null=True, blank=True)
    summary_max_tokens = models.IntegerField(null=True, blank=True)
    reserved_output_tokens = models.IntegerField(null=True, blank=True)
    round_soft_limit = models.IntegerField(null=True, blank=True)
    nudge_text = models.TextField(null=True, blank=True)  # noqa: DJ001 (NULL inherits)
    round_hard_cap = models.IntegerField(null=True, blank=True)
    archive_retention_days = models.IntegerField(null=True, blank=True)
    call_retention_days = models.IntegerField(null=True, blank=True)
    log_retention_days = models.IntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "policies"
        constraints = [
            models.UniqueConstraint(
                fields=["is_global"], condition=Q(is_global=True), name="policy_one_global_row"
            ),
            models.CheckConstraint(
                condition=(Q(is_global=True) & Q(profile__isnull=True))
                | (Q(is_global=False) & Q(profile__isnull=False)),
                name="policy_global_xor_profile",
            ),
        ]

    def __str__(self) -> str:
        return "global policy" if self.is_global else f"policy of {self.profile}"


class Heartbeat(models.Model):
    """The last time a background process (worker, beat) proved it was alive."""

    name = models.CharField(max_length=50, unique=True)
    at = models.DateTimeField()
    detail = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.name} @ {self.at.isoformat()}"


def money_field() -> models.DecimalField[Decimal | None, Decimal | None]:
    """Dollars, exact: nine decimal places keep a single cached token's price (0.3 µ$)."""
    return models.DecimalField(max_digits=20, decimal_places=9, null=True, blank=True)


class CatalogueModel(models.Model):
    """A model's window and list prices ($ per million tokens), editable by admins.

    Seeded from `telemetry.pricing.SEED_CATALOGUE`. A NULL write rate means the provider has
    no cache-write surcharge (OpenAI). The `lc_*` rates apply to the whole request when its
    input exceeds `long_context_threshold` (Anthropic's long-context tier).
    """

    model = models.CharField(max_length=200, unique=True)
    provider = models.CharField(
        max_length=20, choices=[("anthropic", "Anthropic"), ("openai", "OpenAI")]
    )
    family = models.CharField(max_length=200)
    # The standard window every account gets; `max_window_tokens` is an opt-in maximum (a 1M
    # beta) that only applies when a record or a profile says the agent runs with it.
    window_tokens = models.PositiveIntegerField()
    max_window_tokens = models.PositiveIntegerField(null=True, blank=True)
    input = models.DecimalField(max_digits=12, decimal_places=6)
    output = models.DecimalField(max_digits=12, decimal_places=6)
    cache_read = models.DecimalField(max_digits=12, decimal_places=6)
    cache_write_5m = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    cache_write_1h = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    long_context_threshold = models.PositiveIntegerField(null=True, blank=True)
    lc_input = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    lc_output = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    lc_cache_read = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    lc_cache_write_5m = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    lc_cache_write_1h = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["provider", "model"]

    def __str__(self) -> str:
        return self.model


class AgentSession(models.Model):
    """One agent conversation, unique per (profile, the agent's own session id).

    The figures are derived from the session's turns (`telemetry.derivation`) after every ingest
    batch; they are stored so lists and badges read one row. Every write to a session row goes
    through `telemetry.session_state`.
    """

    profile = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="sessions")
    external_id = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    turns_count = models.PositiveIntegerField(default=0)
    calls_count = models.PositiveIntegerField(default=0)
    last_turn = models.PositiveIntegerField(null=True, blank=True)
    last_turn_rounds = models.PositiveIntegerField(default=0)
    max_turn_rounds = models.PositiveIntegerField(default=0)
    current_context_tokens = models.BigIntegerField(null=True, blank=True)
    peak_context_tokens = models.BigIntegerField(null=True, blank=True)
    projected_tokens = models.BigIntegerField(null=True, blank=True)
    window_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Where `window_tokens` came from (`telemetry.windows.WindowSource`), "" when unknown.
    window_source = models.CharField(
        max_length=20, blank=True, default="", choices=list(SOURCE_LABELS.items())
    )
    # The limit a provider stated in an overflow error, for `learned_window_model` (D4, D6).
    learned_window_tokens = models.PositiveIntegerField(null=True, blank=True)
    learned_window_model = models.CharField(max_length=200, blank=True, default="")
    pressure = models.FloatField(null=True, blank=True)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_denominator_tokens = models.BigIntegerField(default=0)
    cache_reported_calls = models.PositiveIntegerField(default=0)
    last_turn_cache_hit_ratio = models.FloatField(null=True, blank=True)
    cost_usd = money_field()
    no_cache_cost_usd = money_field()
    unpriced_calls = models.PositiveIntegerField(default=0)
    # The totals of the turns call retention removed (`telemetry.session_totals.totals_as_json`;
    # NULL: none removed). The figures above are these joined with the kept turns' totals, so
    # re-deriving them from the kept turns (a replay, a late call, a repricing) keeps them.
    retired_totals = models.JSONField(null=True, blank=True)
    # Set by a compaction: the surface's estimated size replaces the stale projection until the
    # next call is reported (D6). `surface_version` is the latest the log has reached.
    surface_estimate_tokens = models.BigIntegerField(null=True, blank=True)
    surface_version = models.PositiveIntegerField(default=0)
    # Set when an automatic relief job is enqueued, cleared when it finishes: one pending job.
    relief_requested_at = models.DateTimeField(null=True, blank=True)
    # The surface version the last automatic relief ran on: one job per surface version, so a
    # surface that cannot shrink further is not re-planned on every report.
    relief_tried_version = models.PositiveIntegerField(null=True, blank=True)
    # What the doors said about the session (`telemetry.session_meta`): the merged metadata, the
    # door each key came from, and the columns the sessions list filters and searches on.
    metadata = models.JSONField(default=dict, blank=True)
    metadata_doors = models.JSONField(default=dict, blank=True)
    title = models.CharField(max_length=200, blank=True, default="")
    meta_user = models.CharField(max_length=200, blank=True, default="")
    repository = models.CharField(max_length=200, blank=True, default="")
    git_branch = models.CharField(max_length=200, blank=True, default="")
    agent_name = models.CharField(max_length=200, blank=True, default="")
    agent_version = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["profile", "external_id"], name="session_unique_per_profile"
            )
        ]
        indexes = [
            models.Index(fields=["-last_seen_at"], name="session_last_seen"),
            models.Index(fields=["profile", "-last_seen_at"], name="session_profile_seen"),
            # the sessions list's model filter: a loose index scan over this (console.selectors.session_list)
            models.Index(fields=["model"], name="session_model"),
            # the overview: sessions per pressure band are range counts on this, and each
            # profile's top sessions by pressure (then newest) its last entries; both count only
            # the sessions active in the range, read from the covering `last_seen_at`
            # (PostgreSQL; other backends read the row)
            models.Index(
                fields=["profile", "pressure", "id"],
                include=["last_seen_at"],
                name="session_profile_pressure",
            ),
            # the overview's top sessions by cost (then newest): the first entries, not a sort
            models.Index(fields=["-cost_usd", "-id"], name="session_cost"),
            # the sessions list's metadata filters (console.selectors.session_list)
            models.Index(fields=["meta_user"], name="session_meta_user"),
            models.Index(fields=["repository"], name="session_repository"),
            models.Index(fields=["git_branch"], name="session_git_branch"),
            models.Index(fields=["agent_name"], name="session_agent_name"),
            # relief's candidates (`compaction.relief_state.candidates`: over the threshold with
            # a transcript, or relief asked for), which the overview's and /metrics' relief
            # counts and the sessions list's relief filters read: a bitmap OR of these two, a
            # few entries each, instead of reading every session
            models.Index(
                fields=["profile", "pressure"],
                condition=Q(surface_version__gt=0),
                name="session_relief_over",
            ),
            models.Index(
                fields=["id"],
                condition=Q(relief_requested_at__isnull=False),
                name="session_relief_asked",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.profile.name}/{self.external_id}"

    @property
    def cache_hit_ratio(self) -> float | None:
        return hit_ratio(
            self.cache_read_tokens, self.cache_denominator_tokens, self.cache_reported_calls
        )


class SessionTag(models.Model):
    """An operator's tag on a session (`telemetry.tag_rules` says what a tag may be), once per
    session. Written only by `telemetry.session_tags`; audited (settings.AUDITLOG_...)."""

    session = models.ForeignKey(AgentSession, on_delete=models.CASCADE, related_name="tags")
    tag = models.CharField(max_length=40)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "tag"], name="session_tag_once"),
        ]
        indexes = [
            # the sessions list's tag filter and its choices: sessions by tag, tags in order
            models.Index(fields=["tag", "session"], name="session_tag_by_tag"),
        ]

    def __str__(self) -> str:
        return f"{self.tag} on session {self.session_id}"


class FlagList(models.JSONField):
    """A call's flags (`telemetry.usage`'s words, a list): NULL when there are none, as for
    almost every call, where `[]` took five bytes a row (docs/scaling.md). Read back as `[]`,
    so no reader sees the difference; the migration that made it is a plain JSONField's
    (`deconstruct`), the column being jsonb either way."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        found = super().from_db_value(value, expression, connection)
        return [] if found is None else found

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        return super().get_db_prep_save(stored_flags(value), connection)

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


def stored_flags(flags: Any) -> Any:
    """A call's flags as stored: None (SQL NULL) for none, else the list (the one rule of
    `FlagList`, which COPY's rows follow too: `telemetry.costing.call_values`)."""
    if flags is None or (isinstance(flags, list | tuple) and not flags):
        return None
    return list(flags) if isinstance(flags, tuple) else flags


class LLMCall(models.Model):
    """One LLM call as an agent reported it: disjoint token buckets, the raw usage, the cost."""

    # No index of its own: `call_unique_position` (session, turn, call) leads with it and serves
    # every lookup by session; a second index cost each inserted call its maintenance.
    # No database constraint either. Django makes its foreign keys DEFERRABLE INITIALLY
    # DEFERRED, so each inserted call queued a check of its session that ran at COMMIT, backend
    # CPU on every batch (make bench P1). What it guarded holds without it:
    # every writer of calls and turns upserts and locks their session row first, in the same
    # transaction (`session_state.lock_sessions`), so it cannot vanish under them; the product
    # deletes a session only through the ORM, which deletes its calls and turns itself
    # (`session_state.discard_unused_sessions`, under that lock; sessions are not in the admin).
    # tests/db/test_session_children.py holds the cascade.
    session = models.ForeignKey(
        AgentSession,
        on_delete=models.CASCADE,
        related_name="calls",
        db_index=False,
        db_constraint=False,
    )
    turn = models.PositiveIntegerField()
    call = models.PositiveIntegerField(default=0)
    request_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (NULL: not given)
    model = models.CharField(max_length=200)
    provider = models.CharField(max_length=32)
    # A call's counts: `integer` (int4) columns, half a `bigint`'s bytes; every door refuses a
    # count above `telemetry.usage.MAX_STORED_COUNT` by name.
    uncached_input = models.IntegerField()
    cache_read = models.IntegerField()
    cache_write_5m = models.IntegerField()
    cache_write_1h = models.IntegerField()
    output = models.IntegerField()
    reasoning_output = models.IntegerField(null=True, blank=True)
    reported_cache = models.BooleanField()
    context_tokens = models.IntegerField()
    # NULL: the usage was what `telemetry.usage_forms.derived_usage` builds from the buckets
    # (the usual one); read it through `usage_as_sent`, never this column directly.
    raw_usage = models.JSONField(null=True, blank=True)
    flags = FlagList(default=list, null=True, blank=True)
    request_chars = models.IntegerField(null=True, blank=True)
    appended_chars = models.IntegerField(null=True, blank=True)
    window_tokens = models.PositiveIntegerField(null=True, blank=True)
    surface_version = models.PositiveIntegerField(null=True, blank=True)
    # D1/D2: the request's prefix fingerprints as the agent reported them (`telemetry.cache_misses`
    # reads them): [{"name": "system", "hash": ..., "tokens": ..., "text"?: ...}, ...].
    prefix = models.JSONField(null=True, blank=True)
    # What the provider said about this request's prompt cache (`telemetry.cache_diagnostics`):
    # its word (Anthropic's `cache_miss_reason.type`, OpenAI's miss `reason` or outcome), the
    # tokens it says missed, and its object verbatim under its format ({"anthropic": {...}}).
    # NULL: the call carried no diagnostics.
    provider_miss_type = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 (NULL: not given)
    provider_missed_tokens = models.IntegerField(null=True, blank=True)
    provider_diagnostics = models.JSONField(null=True, blank=True)
    at = models.DateTimeField()
    cost_uncached_input = money_field()
    cost_cache_read = money_field()
    cost_cache_write_5m = money_field()
    cost_cache_write_1h = money_field()
    cost_output = money_field()
    cost_usd = money_field()
    no_cache_cost_usd = money_field()
    long_context = models.BooleanField(default=False)
    # Idempotency: the SHA-256 of the submitted record, canonical JSON, server defaults excluded,
    # as its 32 raw bytes (`telemetry.idempotency.stored_digest`; the export writes it in hex).
    payload_hash = models.BinaryField(max_length=32)
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "turn", "call"], name="call_unique_position"
            ),
            models.UniqueConstraint(
                fields=["session", "request_id"],
                condition=Q(request_id__isnull=False),
                name="call_unique_request_id",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.turn}.{self.call}"

    @property
    def usage_as_sent(self) -> Any:
        """The usage exactly as the agent reported it (`telemetry.usage_forms`)."""
        return usage_as_sent(self.raw_usage, self)


class Turn(models.Model):
    """The figures of one turn, derived from its calls by `telemetry.derivation` (never edited)."""

    # No index of its own: `turn_unique` (session, turn) leads with it, and no database
    # constraint: see LLMCall.session for both.
    session = models.ForeignKey(
        AgentSession,
        on_delete=models.CASCADE,
        related_name="turns",
        db_index=False,
        db_constraint=False,
    )
    turn = models.PositiveIntegerField()
    calls = models.PositiveIntegerField()
    context_tokens = models.BigIntegerField()
    uncached_input = models.BigIntegerField()
    cache_read = models.BigIntegerField()
    cache_write_5m = models.BigIntegerField()
    cache_write_1h = models.BigIntegerField()
    output = models.BigIntegerField()
    reasoning_output = models.BigIntegerField(null=True, blank=True)
    cache_reported_calls = models.PositiveIntegerField()
    cache_read_reported = models.BigIntegerField()
    cache_denominator = models.BigIntegerField()
    cost_uncached_input = money_field()
    cost_cache_read = money_field()
    cost_cache_write_5m = money_field()
    cost_cache_write_1h = money_field()
    cost_output = money_field()
    cost_usd = money_field()
    no_cache_cost_usd = money_field()
    unpriced_calls = models.PositiveIntegerField()
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    model = models.CharField(max_length=200)
    last_call = models.PositiveIntegerField()
    # the turn's last call's own counts, `integer` as the call's (its sums above stay `bigint`:
    # a long turn may pass 2**31)
    last_call_context_tokens = models.IntegerField()
    last_call_output = models.IntegerField()
    last_call_reasoning_output = models.IntegerField(null=True, blank=True)
    last_call_appended_chars = models.IntegerField(null=True, blank=True)
    last_call_window_tokens = models.PositiveIntegerField(null=True, blank=True)
    surface_version = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "turn"], name="turn_unique")]
        # and, on PostgreSQL, `turn_last_at_brin` (migration 0028): the retention scan's index

    def __str__(self) -> str:
        return f"{self.session_id}:{self.turn}"

    @property
    def cache_hit_ratio(self) -> float | None:
        return hit_ratio(
            self.cache_read_reported, self.cache_denominator, self.cache_reported_calls
        )


class ContextEvent(models.Model):
    """A change to a session's context that was not one of our own compaction runs.

    Agents compact by themselves (Claude Code's /compact and auto-compact, Codex's
    `compacted`), providers compact or edit server-side (Anthropic's compaction iterations and
    `context_management.applied_edits`, OpenAI's `compaction` items), and agents report context
    overflows through telemetry. On-ramps (OTLP, transcript import, usage normalisation) record
    them here through `telemetry.events.record_context_event`; `compaction.models.CompactionRun`
    stays the record of what *we* did. Idempotent on (session, source_key).
    """

    class Kind(models.TextChoices):
        COMPACTION = "compaction", "compaction"
        CONTEXT_EDIT = "context_edit", "context edit"
        OVERFLOW = "overflow", "overflow"

    class Origin(models.TextChoices):
        AGENT = "agent", "agent"
        PROVIDER = "provider", "provider"

    session = models.ForeignKey(
        AgentSession, on_delete=models.CASCADE, related_name="context_events"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    origin = models.CharField(max_length=16, choices=Origin.choices)
    # Where we learned of it: "otlp", "claude-code", "codex", "telemetry", ...
    source = models.CharField(max_length=40)
    # Unique per session: a span id, a transcript line's uuid, a request id + iteration, ...
    source_key = models.CharField(max_length=200)
    trigger = models.CharField(max_length=40, blank=True, default="")
    turn = models.PositiveIntegerField(null=True, blank=True)
    # No database constraint: on PostgreSQL a packed call is a row of a view
    # (`telemetry.packing`), which no constraint can name; the ORM sets the link to NULL when
    # its call is removed.
    call = models.ForeignKey(
        LLMCall,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="context_events",
        db_constraint=False,
    )
    tokens_before = models.BigIntegerField(null=True, blank=True)
    tokens_after = models.BigIntegerField(null=True, blank=True)
    # The summary text or replacement history, readable in the console.
    summary = models.TextField(blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["session", "source_key"], name="context_event_unique_source"
            )
        ]
        indexes = [models.Index(fields=["session", "at"], name="context_event_session_at")]
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.origin} {self.kind} of {self.session_id} at {self.at:%Y-%m-%d %H:%M}"

    @property
    def tokens_freed(self) -> int | None:
        if self.tokens_before is None or self.tokens_after is None:
            return None
        return self.tokens_before - self.tokens_after


class TurnKey(models.Model):
    """An on-ramp's own name for a turn and the turn number it was given in its session.

    OTLP numbers nothing: a GenAI span names its trace, a Claude Code event its `prompt.id`.
    The first time a session sees a key it gets the session's next turn number; every later
    span or event of that key (another export, a replay) lands in the same turn.
    """

    # No index of its own: `turn_key_unique` (session, key) leads with it, and no database
    # constraint: see LLMCall.session for both (an OTLP export opens a turn key per trace, and
    # each queued its session's check for COMMIT; `otlp.store` locks the session first).
    session = models.ForeignKey(
        AgentSession,
        on_delete=models.CASCADE,
        related_name="turn_keys",
        db_index=False,
        db_constraint=False,
    )
    key = models.CharField(max_length=200)  # "trace:<hex>", "prompt:<id>"
    turn = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "key"], name="turn_key_unique"),
            models.UniqueConstraint(fields=["session", "turn"], name="turn_key_unique_turn"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.key} -> {self.turn}"


class HourlyUsage(models.Model):
    """One hour of one profile's calls to one model: bucket, cache and cost sums.

    Maintained at ingest by `telemetry.rollups` (incremented in the batch's transaction, so the
    sums equal the calls stored), read by the console's overview instead of scanning calls.
    `hour` is the start of the UTC hour the calls' `at` fell in.

    `stripe`: an hour of a model may span several rows, whose sums add up (readers always sum).
    Stripe 0 is the row; a writer that finds it held by a concurrent transaction adds to a free
    stripe 1-7 instead of queueing behind that transaction's commit (`telemetry.rollups`).
    """

    profile = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    hour = models.DateTimeField()
    stripe = models.PositiveSmallIntegerField(default=0, db_default=0)
    calls = models.BigIntegerField(default=0)
    uncached_input = models.BigIntegerField(default=0)
    cache_read = models.BigIntegerField(default=0)
    cache_write_5m = models.BigIntegerField(default=0)
    cache_write_1h = models.BigIntegerField(default=0)
    output = models.BigIntegerField(default=0)
    cache_reported_calls = models.BigIntegerField(default=0)
    cache_read_reported = models.BigIntegerField(default=0)
    cache_denominator = models.BigIntegerField(default=0)
    unpriced_calls = models.BigIntegerField(default=0)
    cost_uncached_input = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    cost_cache_read = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    cost_cache_write_5m = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    cost_cache_write_1h = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    cost_output = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    cost_usd = models.DecimalField(max_digits=24, decimal_places=9, default=0)
    # what the priced calls would have cost without the cache (the cache saved the difference)
    no_cache_cost_usd = models.DecimalField(max_digits=24, decimal_places=9, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["profile", "model", "hour", "stripe"], name="hourly_usage_unique"
            )
        ]
        indexes = [models.Index(fields=["hour"], name="hourly_usage_hour")]

    def __str__(self) -> str:
        return f"{self.profile_id}/{self.model}@{self.hour.isoformat()}"


class RateCount(models.Model):
    """Requests of one agent key in one minute: the rate limit's counter when no shared cache
    is configured, so every web process counts against one budget (`telemetry.ratelimit`)."""

    key_id = models.BigIntegerField()
    window = models.BigIntegerField()  # minutes since the epoch
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key_id", "window"], name="rate_count_unique")
        ]

    def __str__(self) -> str:
        return f"key {self.key_id} minute {self.window}: {self.count}"
