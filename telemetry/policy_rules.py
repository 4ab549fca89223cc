"""Policy values (D3, D7, D8): defaults, per-profile overrides, and the validation rules.

Pure: no Django. The database keeps one global row and optional per-profile rows whose `None`
fields inherit the global value; `merge_policy` computes what an agent of a profile gets and
`validate_policy` refuses combinations that cannot work, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Literal

from telemetry.errors import FieldError

CacheTTL = Literal["5m", "1h"]
CACHE_TTLS: tuple[CacheTTL, ...] = ("5m", "1h")

# D7: long-lived fleet and desktop agents see gaps between requests of minutes, where the 1h
# cache tier pays; every other profile stays on the 5-minute default.
ONE_HOUR_TTL_PROFILES = ("fleet", "desktop")
SEEDED_PROFILES = ("default", "fleet", "desktop")

DEFAULT_NUDGE_TEXT = (
    "You have taken many steps in this turn. Pause and re-read your instructions and plan: "
    "restate the goal, what is done, and the next step before calling more tools."
)


@dataclass(frozen=True, slots=True)
class PolicyValues:
    """The effective policy of one agent profile. Every field has a value."""

    cache_ttl: CacheTTL = "5m"
    prune_threshold: float = 0.60
    summarize_threshold: float = 0.80
    # Automatic relief aims this far below prune_threshold (a share of the usable window), so a
    # relieved session grows for several rounds before it needs relief again (D1: one cache
    # miss per pass). 0.15 with the default threshold aims at 45 %.
    relief_hysteresis: float = 0.15
    keep_rounds: int = 4
    keep_rounds_verbatim: int = 4
    stub_head_chars: int = 400
    stub_tail_chars: int = 200
    max_result_chars: int = 50_000
    prune_min_free_tokens: int = 4_000
    prune_exclude_tools: tuple[str, ...] = ()
    summary_max_tokens: int = 2_000
    reserved_output_tokens: int = 16_000
    round_soft_limit: int = 40
    nudge_text: str = DEFAULT_NUDGE_TEXT
    round_hard_cap: int = 100
    archive_retention_days: int = 90
    # Days raw calls and turns are kept (0: forever); hour rollups, session totals, compaction
    # history and context events stay whatever it is (`telemetry.retention`).
    call_retention_days: int = 0
    # Days a transcript message's text is kept (0: forever); after it, the text of a message the
    # surface no longer shows goes once an archive holds it (`compaction.log_retention`).
    log_retention_days: int = 0

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["prune_exclude_tools"] = list(self.prune_exclude_tools)
        return data


POLICY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PolicyValues))
DEFAULT_POLICY = PolicyValues()

_NON_NEGATIVE_INTS = (
    "keep_rounds",
    "keep_rounds_verbatim",
    "stub_head_chars",
    "stub_tail_chars",
    "prune_min_free_tokens",
    "reserved_output_tokens",
    "call_retention_days",
    "log_retention_days",
)
_POSITIVE_INTS = (
    "max_result_chars",
    "summary_max_tokens",
    "round_soft_limit",
    "round_hard_cap",
    "archive_retention_days",
)
_MAX_INT = 2**31 - 1


def default_policy_for(profile_name: str) -> PolicyValues:
    """The seeded policy of a profile: the defaults, with the D7 TTL tier."""
    if profile_name in ONE_HOUR_TTL_PROFILES:
        return replace(DEFAULT_POLICY, cache_ttl="1h")
    return DEFAULT_POLICY


def merge_policy(base: PolicyValues, overrides: Mapping[str, object]) -> PolicyValues:
    """`base` with every non-None override applied; unknown keys are refused."""
    changes: dict[str, object] = {}
    for name, value in overrides.items():
        if name not in POLICY_FIELDS:
            raise FieldError(name, "is not a policy field")
        if value is None:
            continue
        if name == "prune_exclude_tools":
            value = _tool_names(value)
        changes[name] = value
    merged = replace(base, **changes)  # type: ignore[arg-type]
    validate_policy(merged)
    return merged


def _tool_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        items = [part.strip() for part in value.replace("\n", ",").split(",")]
    elif isinstance(value, list | tuple):
        items = [item.strip() if isinstance(item, str) else item for item in value]
    else:
        raise FieldError("prune_exclude_tools", "must be a list of tool names")
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise FieldError("prune_exclude_tools", "must contain only strings")
        if item and item not in names:
            names.append(item)
    return tuple(sorted(names))


def validate_policy(policy: PolicyValues) -> None:
    """Refuse values that cannot work together. Raises `FieldError` naming the field."""
    if policy.cache_ttl not in CACHE_TTLS:
        raise FieldError("cache_ttl", f"must be one of {', '.join(CACHE_TTLS)}")
    for name in ("prune_threshold", "summarize_threshold", "relief_hysteresis"):
        value = getattr(policy, name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FieldError(name, "must be a number")
        if name == "relief_hysteresis":
            if not 0 <= value <= 1:
                raise FieldError(name, "must be at least 0 and at most 1 (a share of the window)")
        elif not 0 < value <= 1:
            raise FieldError(name, "must be greater than 0 and at most 1 (a share of the window)")
    if policy.summarize_threshold < policy.prune_threshold:
        raise FieldError(
            "summarize_threshold",
            f"must not be below prune_threshold ({policy.prune_threshold:.0%}): tool results are "
            "pruned before older turns are summarized, never after",
        )
    for name in _NON_NEGATIVE_INTS + _POSITIVE_INTS:
        value = getattr(policy, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(name, "must be an integer")
        if value < 0:
            raise FieldError(name, "must not be negative")
        if name in _POSITIVE_INTS and value == 0:
            raise FieldError(name, "must be at least 1")
        if value > _MAX_INT:
            raise FieldError(name, f"must be at most {_MAX_INT}")
    if policy.stub_head_chars + policy.stub_tail_chars >= policy.max_result_chars:
        raise FieldError(
            "max_result_chars",
            "must exceed stub_head_chars + stub_tail_chars, or a stub would not be smaller than a result",
        )
    if policy.round_soft_limit > policy.round_hard_cap:
        raise FieldError("round_soft_limit", "must not exceed round_hard_cap")
    if not isinstance(policy.nudge_text, str) or not policy.nudge_text.strip():
        raise FieldError("nudge_text", "must not be empty")
    if "\x00" in policy.nudge_text:
        raise FieldError("nudge_text", "must not contain NUL characters")
    for tool in policy.prune_exclude_tools:
        if not isinstance(tool, str) or not tool:
            raise FieldError("prune_exclude_tools", "must contain non-empty tool names")
