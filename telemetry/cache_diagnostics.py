"""What the provider says about a prompt-cache miss, read and mapped onto our causes (D1, D2).
Standard library only.

Two providers compare a request with an earlier one and say where the prefix diverged:

- **Anthropic cache diagnostics** (beta `cache-diagnosis-2026-04-07`): the response's
  `diagnostics` is `{"cache_miss_reason": {"type": …, "cache_missed_input_tokens": n}}`, `type`
  one of `model_changed`, `system_changed`, `tools_changed`, `messages_changed` (these four carry
  the tokens after the divergence), `previous_message_not_found`, `unavailable`. A null
  `cache_miss_reason` means no divergence found, a first turn, or the comparison still running.
  Claude Code writes the same object into its transcripts (`message.diagnostics`).
- **OpenAI Responses prompt-cache diagnostics** (against `prompt_cache_options.
  comparison_response_id`): the response's `prompt_cache_diagnostics` is `{"type":
  "cache_miss", "reason": …, "cache_missed_tokens": n, "comparison_reusable_tokens"?: n}`, or
  `{"type": "cache_hit" | "comparison_response_not_found" | "unavailable"}`; `reason` one of
  `model_changed`, `prompt_cache_key_changed`, `tools_changed`, `text_format_changed`,
  `reasoning_effort_changed`, `verbosity_changed`, `context_compacted`, `input_changed`,
  `service_tier_changed`.

The provider's word (`ProviderDiagnosis.type`) maps onto exactly one of our causes
(`telemetry.cache_misses.CAUSES`), or onto no verdict (the provider could not compare): the one
table is `PROVIDER_TYPES`. A type this module does not know is kept as sent, with no verdict.

Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from telemetry.errors import FieldError
from telemetry.usage import MAX_STORED_COUNT

if TYPE_CHECKING:  # `telemetry.cache_misses` reads this module: the names only, at type time
    from telemetry.cache_misses import Cause

Format = Literal["anthropic", "openai"]

# The word stored for an Anthropic `cache_miss_reason: null` (nothing diverged, a first turn,
# or the comparison still running): kept, so the call shows it was diagnosed.
NO_DIVERGENCE: Final = "no_divergence"


@dataclass(frozen=True, slots=True)
class Meaning:
    """What one provider word says in our taxonomy: the cause (None: no verdict) and, for a
    prefix break, the segment the provider names."""

    cause: Cause | None
    segment: str | None = None
    note: str = ""


# The one mapping of the providers' words onto our causes (docs/concepts.md shows it).
PROVIDER_TYPES: Final[Mapping[str, Meaning]] = {
    # both providers
    "model_changed": Meaning("model_switch", note="the model (or its speed) changed"),
    "tools_changed": Meaning("prefix_break", "tools", "the tool definitions changed"),
    "unavailable": Meaning(None, note="the provider could not diagnose this request"),
    # Anthropic
    "system_changed": Meaning("prefix_break", "system", "the system prompt changed"),
    "messages_changed": Meaning("prefix_break", "messages", "an earlier message changed"),
    "previous_message_not_found": Meaning(
        None, note="the compared request's fingerprint was not found (expired or another id)"
    ),
    NO_DIVERGENCE: Meaning(None, note="no divergence found (or the comparison was pending)"),
    # OpenAI Responses
    "input_changed": Meaning("prefix_break", "messages", "the input items changed"),
    "prompt_cache_key_changed": Meaning(
        "prefix_break", "prompt_cache_key", "the prompt_cache_key changed"
    ),
    "text_format_changed": Meaning("prefix_break", "text_format", "the output format changed"),
    "reasoning_effort_changed": Meaning(
        "prefix_break", "reasoning_effort", "the reasoning effort changed"
    ),
    "verbosity_changed": Meaning("prefix_break", "verbosity", "the verbosity changed"),
    "service_tier_changed": Meaning("prefix_break", "service_tier", "the service tier changed"),
    "context_compacted": Meaning("agent_compaction", note="the provider compacted the context"),
    "cache_hit": Meaning(None, note="the provider reused the compared prefix"),
    "comparison_response_not_found": Meaning(
        None, note="the compared response was not found (expired or another id)"
    ),
}

MAX_TYPE: Final = 64  # the stored word's column width


@dataclass(frozen=True, slots=True)
class ProviderDiagnosis:
    """One call's cache diagnosis as the provider gave it.

    `type` is the provider's most specific word (Anthropic's `cache_miss_reason.type`, OpenAI's
    `reason` of a `cache_miss`, else its `type`); `missed_tokens` the tokens it says fell after
    the divergence (None when not given); `raw` the object verbatim, under its format's name.
    """

    format: Format
    type: str
    missed_tokens: int | None
    raw: Mapping[str, Any]

    @property
    def meaning(self) -> Meaning:
        return PROVIDER_TYPES.get(
            self.type, Meaning(None, note="a type this console does not know")
        )

    @property
    def cause(self) -> Cause | None:
        """Our cause for the provider's word; None: no verdict (the provider could not compare,
        found nothing, or sent a word we do not know)."""
        return self.meaning.cause

    @property
    def known(self) -> bool:
        return self.type in PROVIDER_TYPES

    def stored(self) -> dict[str, Any]:
        """The JSON stored with the call: the provider's object verbatim, under its format."""
        return {self.format: dict(self.raw)}


def count(value: Any, field: str) -> int | None:
    """A token count as the doors send it: an int, an integral float, or a string of digits
    (OTLP attributes, proto3 JSON int64). None stays None; anything else is refused."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise FieldError(field, "must be a whole number of tokens")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise FieldError(field, "must be a whole number of tokens")
    if number < 0:
        raise FieldError(field, "must not be negative")
    if number > MAX_STORED_COUNT:  # the call's `provider_missed_tokens` column
        raise FieldError(field, f"must be at most {MAX_STORED_COUNT}")
    return number


def _word(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FieldError(field, "must be a non-empty string")
    word = value.strip().lower()
    if len(word) > MAX_TYPE:
        raise FieldError(field, f"must be at most {MAX_TYPE} characters")
    return word


def read_anthropic(diagnostics: Any, field: str = "diagnostics") -> ProviderDiagnosis | None:
    """Anthropic's response `diagnostics` object; None when it holds no `cache_miss_reason` key
    (diagnostics not asked for). Raises FieldError (422) naming the field it cannot read."""
    if diagnostics is None:
        return None
    if not isinstance(diagnostics, Mapping):
        raise FieldError(field, "must be an object")
    if "cache_miss_reason" not in diagnostics:
        return None
    reason = diagnostics["cache_miss_reason"]
    if reason is None:
        return ProviderDiagnosis("anthropic", NO_DIVERGENCE, None, diagnostics)
    if not isinstance(reason, Mapping):
        raise FieldError(f"{field}.cache_miss_reason", "must be an object or null")
    kind = _word(reason.get("type"), f"{field}.cache_miss_reason.type")
    tokens = count(
        reason.get("cache_missed_input_tokens"),
        f"{field}.cache_miss_reason.cache_missed_input_tokens",
    )
    return ProviderDiagnosis("anthropic", kind, tokens, diagnostics)


def read_openai(
    diagnostics: Any, field: str = "prompt_cache_diagnostics"
) -> ProviderDiagnosis | None:
    """OpenAI Responses' `prompt_cache_diagnostics`; None for null. Raises FieldError."""
    if diagnostics is None:
        return None
    if not isinstance(diagnostics, Mapping):
        raise FieldError(field, "must be an object")
    kind = _word(diagnostics.get("type"), f"{field}.type")
    tokens = count(diagnostics.get("cache_missed_tokens"), f"{field}.cache_missed_tokens")
    if kind == "cache_miss":
        reason = diagnostics.get("reason")
        # a miss without a reason is a miss the provider did not explain
        kind = "unavailable" if reason is None else _word(reason, f"{field}.reason")
    return ProviderDiagnosis("openai", kind, tokens, diagnostics)


def read_record(
    *,
    diagnostics: Any = None,
    prompt_cache_diagnostics: Any = None,
    usage: Mapping[str, Any] | None = None,
) -> ProviderDiagnosis | None:
    """A JSON record's diagnosis: its `diagnostics` (Anthropic) or `prompt_cache_diagnostics`
    (OpenAI Responses), else the same keys inside its `usage` (an agent that reports the
    response's extras with the usage). Anthropic's wins when both are given."""
    found = read_anthropic(diagnostics) or read_openai(prompt_cache_diagnostics)
    if found is not None or usage is None:
        return found
    if "diagnostics" in usage:
        found = read_anthropic(usage["diagnostics"], "usage.diagnostics")
    if found is None and "cache_miss_reason" in usage:
        found = read_anthropic({"cache_miss_reason": usage["cache_miss_reason"]}, "usage")
    if found is None and "prompt_cache_diagnostics" in usage:
        found = read_openai(usage["prompt_cache_diagnostics"], "usage.prompt_cache_diagnostics")
    return found


# --- OTLP attributes ------------------------------------------------------------------------------

# The attributes a span or log record may carry a diagnosis in, by format: Claude Code's flat
# names first, then the provider-prefixed ones of instrumentations.
ANTHROPIC_TYPE_KEYS: Final = (
    "cache_miss_reason",
    "cache_miss_reason.type",
    "anthropic.diagnostics.cache_miss_reason.type",
    "anthropic.cache_miss_reason.type",
)
ANTHROPIC_TOKEN_KEYS: Final = (
    "cache_missed_input_tokens",
    "cache_miss_reason.cache_missed_input_tokens",
    "anthropic.diagnostics.cache_miss_reason.cache_missed_input_tokens",
    "anthropic.cache_miss_reason.cache_missed_input_tokens",
)
OPENAI_TYPE_KEYS: Final = ("openai.prompt_cache_diagnostics.type",)
OPENAI_REASON_KEYS: Final = ("openai.prompt_cache_diagnostics.reason",)
OPENAI_TOKEN_KEYS: Final = ("openai.prompt_cache_diagnostics.cache_missed_tokens",)
OPENAI_REUSABLE_KEYS: Final = ("openai.prompt_cache_diagnostics.comparison_reusable_tokens",)


# The attributes without one of which `record_fields` finds no diagnosis.
_DIAGNOSIS_KEYS: Final = frozenset((*ANTHROPIC_TYPE_KEYS, *OPENAI_TYPE_KEYS, *OPENAI_REASON_KEYS))


def _first(attributes: Mapping[str, Any], names: Iterable[str]) -> tuple[str, Any] | None:
    for name in names:
        if name in attributes and attributes[name] not in (None, ""):
            return name, attributes[name]
    return None


def record_fields(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON record fields (`diagnostics` or `prompt_cache_diagnostics`) an OTLP span's or
    log record's attributes carry, rebuilt as the provider's object; {} when none.

    A `cache_miss_reason` attribute may hold the type (`"messages_changed"`) or the whole
    object as JSON text (`{"type": …, "cache_missed_input_tokens": …}`). Counts are kept as
    sent: the record's reader (`read_record`) checks them and names the attribute it refuses.
    """
    if _DIAGNOSIS_KEYS.isdisjoint(attributes):  # what nearly every span is: one C call
        return {}
    found = _first(attributes, ANTHROPIC_TYPE_KEYS)
    if found is not None:
        name, value = found
        reason: Any = value
        if isinstance(value, str) and value.lstrip().startswith("{"):
            try:
                reason = json.loads(value)
            except ValueError:
                reason = value
        reason = dict(reason) if isinstance(reason, Mapping) else {"type": reason}
        tokens = _first(attributes, ANTHROPIC_TOKEN_KEYS)
        if tokens is not None and "cache_missed_input_tokens" not in reason:
            reason["cache_missed_input_tokens"] = tokens[1]
        return {"diagnostics": {"cache_miss_reason": reason}}
    kind = _first(attributes, OPENAI_TYPE_KEYS)
    reason_word = _first(attributes, OPENAI_REASON_KEYS)
    if kind is None and reason_word is None:
        return {}
    out: dict[str, Any] = {"type": kind[1] if kind is not None else "cache_miss"}
    if reason_word is not None:
        out["reason"] = reason_word[1]
    for keys, key in (
        (OPENAI_TOKEN_KEYS, "cache_missed_tokens"),
        (OPENAI_REUSABLE_KEYS, "comparison_reusable_tokens"),
    ):
        value = _first(attributes, keys)
        if value is not None:
            out[key] = value[1]
    return {"prompt_cache_diagnostics": out}


# --- beside our own reading -----------------------------------------------------------------------

# A compaction rewrites the messages: the provider sees `messages_changed` where we know who
# changed them. Those readings agree.
_COMPACTIONS: Final[frozenset[str]] = frozenset({"our_compaction", "agent_compaction"})


def agrees(provider: Cause, ours: Cause, segment: str | None = None) -> bool:
    """Whether our inferred cause agrees with the provider's: the same cause, or a compaction
    (ours or the agent's) where the provider saw the messages change."""
    if provider == ours:
        return True
    return provider == "prefix_break" and segment == "messages" and ours in _COMPACTIONS


def describe(diagnosis: ProviderDiagnosis) -> str:
    """The provider's reading in words: `provider: messages_changed, 12,016 tokens`."""
    tokens = "" if diagnosis.missed_tokens is None else f", {diagnosis.missed_tokens:,} tokens"
    return f"provider: {diagnosis.type}{tokens}"


def from_stored(
    kind: str | None, tokens: int | None, stored: Mapping[str, Any] | None
) -> ProviderDiagnosis | None:
    """A call's diagnosis from its stored columns (`provider_miss_type`,
    `provider_missed_tokens`, `provider_diagnostics`); None when the call has none."""
    if kind is None:
        return None
    fmt: Format = "openai" if stored is not None and "openai" in stored else "anthropic"
    raw = stored.get(fmt, {}) if stored is not None else {}
    return ProviderDiagnosis(fmt, kind, tokens, raw if isinstance(raw, Mapping) else {})


@dataclass(frozen=True, slots=True)
class Agreement:
    """How often our inferred cause agreed with the provider's, over the misses both read."""

    compared: int = 0
    agreed: int = 0

    @property
    def rate(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    def __add__(self, other: Agreement) -> Agreement:
        return Agreement(self.compared + other.compared, self.agreed + other.agreed)
