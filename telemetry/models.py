"""Agent profiles, their keys and policy, and the worker heartbeat.

Writes go through the services (`telemetry.keys`, `telemetry.policies`), never a raw `.save()`
elsewhere: one write path per action.
"""

from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

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
    lives in the pure `telemetry.policy` module; `telemetry.policies` is the one write path.
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
