"""Normalise a provider's usage object into disjoint token buckets.

Standard library only: the unit suite runs with `-p no:django`, and the ingest API, the simulator
and the console all call this one function, so the arithmetic lives in exactly one place.

The providers disagree on what "input" means (see `shared/reference/provider-usage.md`):

- Anthropic Messages: `input_tokens` *excludes* cache reads and writes (disjoint buckets).
- OpenAI Chat and Responses: the prompt/input count *includes* the cached tokens.
- OpenTelemetry GenAI: `gen_ai.usage.input_tokens` SHOULD include cache reads and writes, but
  instrumentations that copy Anthropic's field verbatim exist; when input < read + creation the
  count can only be exclusive, and we say so in `flags`.

Everything here produces one shape, `NormalizedUsage`, whose input buckets never overlap, so
`context_tokens` (the size of the request) is a plain sum for every provider.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol, cast, get_args

from telemetry.errors import FieldError

Provider = Literal["anthropic", "openai_chat", "openai_responses", "otel"]
CacheTTL = Literal["5m", "1h"]

PROVIDERS: Final[tuple[Provider, ...]] = get_args(Provider)

# Every count must survive a round trip through JSON into the console's JavaScript charts, whose
# numbers are doubles: 2**53 - 1 is the largest integer they represent exactly. No real request
# comes near it, so anything above is a corrupt or hostile value, not a big call.
MAX_TOKENS: Final = 2**53 - 1

# The largest count a call's row stores: its token and character counts are `integer` (int4)
# columns, four bytes each where `bigint` took eight (docs/scaling.md). A request is bounded by
# its model's window (a few million tokens at most), three orders of magnitude below; every door
# refuses a call above it by name (`oversized_count`, `telemetry.schemas`,
# `telemetry.cache_diagnostics`) instead of the database refusing its batch. Sums over calls (a
# turn's, a session's, an hour's) stay `bigint`.
MAX_STORED_COUNT: Final = 2**31 - 1

# A call's billed buckets, named as `NormalizedUsage` counts them, a call's row stores them and
# `telemetry.pricing` prices them. The first four are the input buckets: disjoint, so a request's
# size is their sum (`context_size`).
INPUT_BUCKETS: Final = ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h")
BUCKETS: Final = (*INPUT_BUCKETS, "output")


class InputCounts(Protocol):
    """Anything that holds a request's input buckets: a usage, a stored call, its figures."""

    @property
    def uncached_input(self) -> int: ...
    @property
    def cache_read(self) -> int: ...
    @property
    def cache_write_5m(self) -> int: ...
    @property
    def cache_write_1h(self) -> int: ...


def context_size(counts: InputCounts) -> int:
    """The size of a request's input: uncached + cache read + cache writes, every bucket of
    `INPUT_BUCKETS` (tests/unit/telemetry/test_context_size.py holds the two to each other).

    The one definition of a request's size: Python reads it here, SQL from `context_sql`.
    """
    return counts.uncached_input + counts.cache_read + counts.cache_write_5m + counts.cache_write_1h


def oversized_count(usage: NormalizedUsage) -> tuple[str, int] | None:
    """The first count of `usage` a call's row cannot store (above `MAX_STORED_COUNT`), as
    (name, value): an input bucket, the request's size (`context_tokens`, their sum, stored too
    and summed in SQL per row) or the output; None when all fit. The counts are never negative
    and reasoning never exceeds output, so the request's size and the output bound them all."""
    if context_size(usage) <= MAX_STORED_COUNT and usage.output <= MAX_STORED_COUNT:
        return None
    for name in (*INPUT_BUCKETS, "context_tokens", "output"):
        value = context_size(usage) if name == "context_tokens" else getattr(usage, name)
        if value > MAX_STORED_COUNT:
            return name, value
    return None  # pragma: no cover (one of them was above)


def context_sql(alias: str) -> str:
    """`context_size` of the row `alias` names, as an SQL expression over its columns."""
    return "(" + " + ".join(f"{alias}.{name}" for name in INPUT_BUCKETS) + ")"


# The tier an agent that manages its own prompt cache writes with when its record does not say
# (a flat `cache_creation_tokens`, no `cache_creation.ephemeral_*` split): Claude Code writes
# 5-minute entries unless its record splits them. A profile's `cache_ttl` describes what *we*
# serve, not what such an agent wrote, so its untiered writes are billed at the agent's tier.
CLAUDE_CODE: Final = "claude-code"
AGENT_WRITE_TIERS: Final[Mapping[str, CacheTTL]] = {CLAUDE_CODE: "5m"}


def untiered_write_tier(agent: str | None, profile_ttl: CacheTTL) -> CacheTTL:
    """The tier a cache write that names none is billed at: the tier `AGENT_WRITE_TIERS` knows
    `agent` to use, else the profile's `cache_ttl`. The one rule; every door passes the agent it
    knows (`RecordIn.agent`) and `normalize_usage` buckets the writes by the answer.

    Writes a record assigns to a tier itself (`cache_creation.ephemeral_1h_input_tokens`) keep
    that tier whatever this returns: it only places the writes that carry none.
    """
    if agent is None:
        return profile_ttl
    return AGENT_WRITE_TIERS.get(agent.strip().lower(), profile_ttl)


# `flags` values. Each names a fact about the record a reader of the raw usage would want to know.
FLAG_OTEL_INPUT_EXCLUSIVE: Final = "otel_input_exclusive"
FLAG_ANTHROPIC_CACHE_SPLIT_MISMATCH: Final = "anthropic_cache_split_mismatch"


@dataclass(frozen=True, slots=True)
class NormalizedUsage:
    """One LLM call's tokens in disjoint buckets.

    Invariants (checked on construction):
    - every count is an int in [0, MAX_TOKENS];
    - the input buckets `uncached_input`, `cache_read`, `cache_write_5m`, `cache_write_1h` never
      overlap, so `context_tokens` is their sum;
    - `output` is all billed output, reasoning/thinking included; `reasoning_output` is the part of
      `output` that was reasoning (None when the provider did not say) and is never added to it,
      so `reasoning_output <= output`;
    - `reported_cache` is False when the usage object carried no cache field at all, which makes
      the call's cache-hit "unknown" rather than 0 %.
    """

    provider: Provider
    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int
    reasoning_output: int | None
    reported_cache: bool
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {PROVIDERS}, got {self.provider!r}")
        # The usual five counts pass in one expression; any other goes through `_check_count`
        # one by one, which names the first that fails. This, `_build`'s positional call and
        # `_infer_from_keys`' two names keep the usual record cheap on the ingest path
        # (docs/performance.md); tests/unit/telemetry/test_usage_fast_paths holds both paths equal.
        u, r, w5, w1, o = (
            self.uncached_input,
            self.cache_read,
            self.cache_write_5m,
            self.cache_write_1h,
            self.output,
        )
        if not (
            type(u) is int
            and type(r) is int
            and type(w5) is int
            and type(w1) is int
            and type(o) is int
            and 0 <= u <= MAX_TOKENS
            and 0 <= r <= MAX_TOKENS
            and 0 <= w5 <= MAX_TOKENS
            and 0 <= w1 <= MAX_TOKENS
            and 0 <= o <= MAX_TOKENS
        ):
            for name in BUCKETS:
                _check_count(getattr(self, name), name)
        if self.reasoning_output is not None:
            _check_count(self.reasoning_output, "reasoning_output")
            if self.reasoning_output > self.output:
                raise ValueError(
                    f"reasoning_output ({self.reasoning_output}) exceeds output ({self.output})"
                )

    @property
    def cache_write(self) -> int:
        """Tokens written to the cache by this call, both TTL tiers together."""
        return self.cache_write_5m + self.cache_write_1h

    @property
    def context_tokens(self) -> int:
        """The size of this request's input (`context_size`)."""
        return context_size(self)


# `NormalizedUsage`'s slots, each set through its own descriptor (`_checked_usage`).
_set_provider, _set_uncached, _set_read, _set_write_5m, _set_write_1h, _set_output = (
    vars(NormalizedUsage)[name].__set__ for name in ("provider", *BUCKETS)
)
_set_reasoning = vars(NormalizedUsage)["reasoning_output"].__set__
_set_reported = vars(NormalizedUsage)["reported_cache"].__set__
_set_flags = vars(NormalizedUsage)["flags"].__set__


def _checked_usage(
    provider: Provider,
    uncached: int,
    read: int,
    write_5m: int,
    write_1h: int,
    output: int,
    reported_cache: bool,
) -> NormalizedUsage:
    """`NormalizedUsage(provider, uncached, read, write_5m, write_1h, output, None,
    reported_cache)` for counts the caller has checked are ints within [0, MAX_TOKENS]
    (`normalize_usage`'s fast paths): the same instance, without the generated `__init__`'s
    `object.__setattr__` per field and `__post_init__`'s checks made again, which were most of
    the fast path's CPU per record of a batch (make bench P1).
    tests/unit/telemetry/test_usage_fast_paths.py holds it equal to the constructor."""
    usage = _new(NormalizedUsage)
    _set_provider(usage, provider)
    _set_uncached(usage, uncached)
    _set_read(usage, read)
    _set_write_5m(usage, write_5m)
    _set_write_1h(usage, write_1h)
    _set_output(usage, output)
    _set_reasoning(usage, None)
    _set_reported(usage, reported_cache)
    _set_flags(usage, ())
    return usage


_new = object.__new__


def normalize_usage(
    usage: Mapping[str, object],
    *,
    provider: str | None = None,
    model: str | None = None,
    cache_ttl: CacheTTL = "5m",
) -> NormalizedUsage:
    """Turn a usage object, exactly as the provider or instrumentation returned it, into buckets.

    `provider` names the *format* of `usage` when given (aliases accepted, see `_format_for`);
    otherwise the format is inferred from the keys, in this order: `prompt_tokens` → OpenAI Chat;
    `input_tokens_details` or `total_tokens` beside `input_tokens` → OpenAI Responses;
    `cache_*_input_tokens` or `cache_creation` → Anthropic; `gen_ai.*` keys → an OpenTelemetry
    attribute dict; otherwise the family of `model`. `cache_ttl` picks the write bucket when the
    usage reports cache writes without saying which TTL they used (the profile's tier).

    Pure: never mutates `usage`, same input ⇒ equal output. Raises `FieldError` naming the field
    for anything it cannot count exactly: a missing required count, a value that is not an int
    (bools and floats included, even 12.0 — a token count with a fractional type is a bug
    upstream, not a number to round), a negative or absurd (> MAX_TOKENS) count, a cached count
    above the prompt count, reasoning above output, or a shape it cannot recognise.
    Unknown extra keys (`service_tier`, `server_tool_use`, audio details, …) are ignored.
    """
    if (
        type(usage) is dict
        and usage.keys() == _ANTHROPIC_USUAL
        and (provider is None or provider == "anthropic")
    ):
        # The usual record of a batch, Anthropic's four counts: `_normalize` reads it as below,
        # without its seven calls per record (docs/performance.md, P1);
        # tests/unit/telemetry/test_usage_fast_paths.py holds the two equal.
        uncached = usage["input_tokens"]
        output = usage["output_tokens"]
        read = usage["cache_read_input_tokens"]
        written = usage["cache_creation_input_tokens"]
        if (
            type(uncached) is int
            and type(output) is int
            and type(read) is int
            and type(written) is int
            and 0 <= uncached <= MAX_TOKENS
            and 0 <= output <= MAX_TOKENS
            and 0 <= read <= MAX_TOKENS
            and 0 <= written <= MAX_TOKENS
        ):
            if cache_ttl == "5m":
                return _checked_usage("anthropic", uncached, read, written, 0, output, True)
            if cache_ttl == "1h":
                return _checked_usage("anthropic", uncached, read, 0, written, output, True)
    elif provider == "otel" and type(usage) is dict and usage.keys().isdisjoint(_OTEL_OLDER_NAMES):
        # A GenAI span's usual usage (what OTLP's drafts carry): each count under its current
        # name alone, so no alias can disagree, input inclusive of the cache, no reasoning
        # count. `_otel` reads it as below, without its five alias walks;
        # tests/unit/telemetry/test_usage_fast_paths.py holds the two equal.
        total = usage.get(_OTEL_INPUT[0])
        output = usage.get(_OTEL_OUTPUT[0])
        read = usage.get(_OTEL_CACHE_READ[0])
        written = usage.get(_OTEL_CACHE_WRITE[0])
        if (
            type(total) is int
            and type(output) is int
            and (read is None or type(read) is int)
            and (written is None or type(written) is int)
            and usage.get(_OTEL_REASONING[0]) is None
            and 0 <= output <= MAX_TOKENS
            and (read or 0) >= 0
            and (written or 0) >= 0
            # the cache counts are within the input, so within MAX_TOKENS too
            and (read or 0) + (written or 0) <= total <= MAX_TOKENS
        ):
            cached = read is not None or written is not None
            uncached, read, written = total - (read or 0) - (written or 0), read or 0, written or 0
            if cache_ttl == "5m":
                return _checked_usage("otel", uncached, read, written, 0, output, cached)
            if cache_ttl == "1h":
                return _checked_usage("otel", uncached, read, 0, written, output, cached)
    return _normalize(usage, provider=provider, model=model, cache_ttl=cache_ttl)


# The keys of Anthropic's usual usage object: `normalize_usage`'s fast path.
_ANTHROPIC_USUAL: Final = frozenset(
    {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
)


def _normalize(
    usage: Mapping[str, object],
    *,
    provider: str | None,
    model: str | None,
    cache_ttl: CacheTTL,
) -> NormalizedUsage:
    """`normalize_usage` of any usage object: the definition its fast path is held to."""
    if not isinstance(usage, Mapping):
        raise FieldError("usage", f"must be an object, got {_type_name(usage)}")
    if cache_ttl not in ("5m", "1h"):
        raise FieldError("cache_ttl", f"must be '5m' or '1h', got {cache_ttl!r}")

    fmt = _format_for(usage, provider=provider, model=model)
    if fmt == "anthropic":
        return _anthropic(usage, cache_ttl)
    if fmt == "openai_chat":
        return _openai_chat(usage)
    if fmt == "openai_responses":
        return _openai_responses(usage)
    return _otel(usage, cache_ttl)


# --- format selection --------------------------------------------------------------------------

# Vendor or platform names (OTel `gen_ai.provider.name` values and the usual spellings) that
# serve Anthropic's Messages API, whose usage objects have the Anthropic shape.
_ANTHROPIC_ALIASES: Final = frozenset(
    {"anthropic", "aws.bedrock", "bedrock", "gcp.vertex_ai", "vertex_ai", "vertex", "claude"}
)
# Names that say "OpenAI" but not which API: the keys decide between Chat and Responses.
_OPENAI_ALIASES: Final = frozenset({"openai", "azure.ai.openai", "azure_openai", "azure"})
_OTEL_ALIASES: Final = frozenset({"otel", "opentelemetry"})


def _format_for(
    usage: Mapping[str, object], *, provider: str | None, model: str | None
) -> Provider:
    if provider is not None:
        if not isinstance(provider, str):
            raise FieldError("provider", f"must be a string, got {_type_name(provider)}")
        name = provider.strip().lower()
        if name in _OTEL_ALIASES:
            return "otel"
        if _has_otel_keys(usage) and (
            name in PROVIDERS or name in _ANTHROPIC_ALIASES or name in _OPENAI_ALIASES
        ):
            # An attribute dict is OTel-formatted whoever served the call; the vendor name
            # says nothing about which keys to read.
            return "otel"
        if name in PROVIDERS:
            return cast(Provider, name)
        if name in _ANTHROPIC_ALIASES:
            return "anthropic"
        if name in _OPENAI_ALIASES:
            inferred = _infer_from_keys(usage)
            if inferred == "anthropic":
                # Reading these as OpenAI's inclusive counts would silently drop the cache.
                raise FieldError("provider", f"{provider!r} does not match Anthropic cache fields")
            if inferred is not None:
                return inferred
            if "input_tokens" in usage:
                return "openai_responses"
            raise FieldError("usage", "an OpenAI usage object needs prompt_tokens or input_tokens")
        raise FieldError("provider", f"unknown provider {provider!r}")

    inferred = _infer_from_keys(usage)
    if inferred is not None:
        return inferred
    family = _family_of(model)
    if family == "anthropic":
        return "anthropic"
    if family == "openai":
        # `prompt_tokens` was already taken as Chat above; bare input/output is Responses.
        if "input_tokens" in usage:
            return "openai_responses"
        raise FieldError("usage", "an OpenAI usage object needs prompt_tokens or input_tokens")
    raise FieldError(
        "usage",
        "cannot tell the provider from the keys or the model; send `provider` "
        "(anthropic, openai_chat, openai_responses or otel)",
    )


def _infer_from_keys(usage: Mapping[str, object]) -> Provider | None:
    """The issue's inference order; None when the keys alone are ambiguous."""
    if "prompt_tokens" in usage:
        return "openai_chat"
    if "input_tokens" in usage and ("input_tokens_details" in usage or "total_tokens" in usage):
        return "openai_responses"
    if (
        # Anthropic's own two names first: the scan below for any other is most of this
        # function's time on an Anthropic usage object
        "cache_read_input_tokens" in usage
        or "cache_creation_input_tokens" in usage
        or "cache_creation" in usage
        or any(
            isinstance(k, str) and k.startswith("cache_") and k.endswith("_input_tokens")
            for k in usage
        )
    ):
        return "anthropic"
    if _has_otel_keys(usage):
        return "otel"
    return None


def _has_otel_keys(usage: Mapping[str, object]) -> bool:
    return any(isinstance(k, str) and k.startswith("gen_ai.") for k in usage)


_OPENAI_MODEL_PREFIXES: Final = ("gpt", "chatgpt", "o1", "o3", "o4", "codex")


def model_vendor(model: str | None) -> Literal["anthropic", "openai"] | None:
    """The vendor a model id names (Claude: Anthropic; GPT, o-series, Codex: OpenAI), wherever
    it is served from; None when the name says neither."""
    return _family_of(model)


def _family_of(model: str | None) -> Literal["anthropic", "openai"] | None:
    if not model or not isinstance(model, str):
        return None
    # Bedrock ("us.anthropic.claude-…"), Vertex ("…/claude-…@2025…") and gateway ids
    # ("anthropic/claude-…") all carry the family name somewhere, so look for it anywhere.
    name = model.strip().lower().rsplit("/", 1)[-1]
    if "claude" in name:
        return "anthropic"
    if name.startswith("openai."):
        name = name.removeprefix("openai.")
    if name.startswith(_OPENAI_MODEL_PREFIXES):
        return "openai"
    return None


# --- per-format readers ------------------------------------------------------------------------


def _anthropic(usage: Mapping[str, object], cache_ttl: CacheTTL) -> NormalizedUsage:
    uncached = _required(usage, "input_tokens", "usage.input_tokens")
    output = _required(usage, "output_tokens", "usage.output_tokens")
    read = _optional(usage, "cache_read_input_tokens", "usage.cache_read_input_tokens")
    total_write = _optional(
        usage, "cache_creation_input_tokens", "usage.cache_creation_input_tokens"
    )
    split = _mapping(usage, "cache_creation", "usage.cache_creation")
    split_5m = split_1h = None
    if split is not None:
        split_5m = _optional(
            split, "ephemeral_5m_input_tokens", "usage.cache_creation.ephemeral_5m_input_tokens"
        )
        split_1h = _optional(
            split, "ephemeral_1h_input_tokens", "usage.cache_creation.ephemeral_1h_input_tokens"
        )

    flags: list[str] = []
    if split_5m is None and split_1h is None:
        # No TTL split: the profile's tier says which price the writes were charged at.
        write_5m, write_1h = _by_ttl(total_write or 0, cache_ttl)
    else:
        write_5m, write_1h = split_5m or 0, split_1h or 0
        if total_write is not None and total_write != write_5m + write_1h:
            # The split is what Anthropic bills per tier, so it is kept as reported. A total
            # above the split (gateways that zero-fill `cache_creation`) still counts: the
            # unassigned remainder goes to the profile's tier. A total below the split is
            # ignored, since dropping billed split tokens would under-count.
            flags.append(FLAG_ANTHROPIC_CACHE_SPLIT_MISMATCH)
            extra_5m, extra_1h = _by_ttl(max(total_write - write_5m - write_1h, 0), cache_ttl)
            write_5m += extra_5m
            write_1h += extra_1h

    reported = read is not None or total_write is not None or split is not None
    return _build(
        "anthropic",
        uncached=uncached,
        read=read or 0,
        write_5m=write_5m,
        write_1h=write_1h,
        output=output,
        reasoning=None,  # Anthropic bills thinking as output without a separate count.
        reported_cache=reported,
        flags=flags,
    )


def _openai_chat(usage: Mapping[str, object]) -> NormalizedUsage:
    return _openai(
        usage,
        "openai_chat",
        input_key="prompt_tokens",
        output_key="completion_tokens",
        input_details="prompt_tokens_details",
        output_details="completion_tokens_details",
    )


def _openai_responses(usage: Mapping[str, object]) -> NormalizedUsage:
    return _openai(
        usage,
        "openai_responses",
        input_key="input_tokens",
        output_key="output_tokens",
        input_details="input_tokens_details",
        output_details="output_tokens_details",
    )


def _openai(
    usage: Mapping[str, object],
    provider: Provider,
    *,
    input_key: str,
    output_key: str,
    input_details: str,
    output_details: str,
) -> NormalizedUsage:
    prompt = _required(usage, input_key, f"usage.{input_key}")
    output = _required(usage, output_key, f"usage.{output_key}")
    _optional(usage, "total_tokens", "usage.total_tokens")  # type-checked, otherwise unused

    cached: int | None = None
    details = _mapping(usage, input_details, f"usage.{input_details}")
    if details is not None:
        cached_field = f"usage.{input_details}.cached_tokens"
        cached = _optional(details, "cached_tokens", cached_field)
        if cached is not None and cached > prompt:
            # The cached count is a subset of the prompt count; more means a broken object.
            raise FieldError(cached_field, f"{cached} exceeds usage.{input_key} ({prompt})")

    reasoning: int | None = None
    out_details = _mapping(usage, output_details, f"usage.{output_details}")
    if out_details is not None:
        reasoning_field = f"usage.{output_details}.reasoning_tokens"
        reasoning = _optional(out_details, "reasoning_tokens", reasoning_field)
        if reasoning is not None and reasoning > output:
            raise FieldError(reasoning_field, f"{reasoning} exceeds usage.{output_key} ({output})")

    return _build(
        provider,
        uncached=prompt - (cached or 0),
        read=cached or 0,
        # OpenAI has no separate write count: the first time a prefix is seen it is billed as
        # ordinary input, which is where it already is.
        write_5m=0,
        write_1h=0,
        output=output,
        reasoning=reasoning,
        reported_cache=cached is not None,
        flags=[],
    )


# Each quantity with every attribute name seen in the wild; the first is the current one.
_OTEL_INPUT: Final = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
_OTEL_OUTPUT: Final = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
_OTEL_CACHE_READ: Final = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",  # older semconv
    "gen_ai.usage.input_tokens.cached",  # Sentry
)
_OTEL_CACHE_WRITE: Final = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",  # opentelemetry-python-genai #605/#608, newer draft
    "gen_ai.usage.cache_creation_input_tokens",  # older semconv
    "gen_ai.usage.cache_write_input_tokens",  # Strands
    "gen_ai.usage.input_tokens.cache_write",  # Sentry
)
_OTEL_REASONING: Final = ("gen_ai.usage.reasoning.output_tokens",)
# The names of each quantity but its current one (`normalize_usage`'s OTel fast path).
_OTEL_OLDER_NAMES: Final = frozenset(
    name
    for names in (_OTEL_INPUT, _OTEL_OUTPUT, _OTEL_CACHE_READ, _OTEL_CACHE_WRITE, _OTEL_REASONING)
    for name in names[1:]
)


def _otel(usage: Mapping[str, object], cache_ttl: CacheTTL) -> NormalizedUsage:
    total_input = _otel_count(usage, _OTEL_INPUT, required=True)
    output = _otel_count(usage, _OTEL_OUTPUT, required=True)
    read = _otel_count(usage, _OTEL_CACHE_READ)
    write = _otel_count(usage, _OTEL_CACHE_WRITE)
    reasoning = _otel_count(usage, _OTEL_REASONING)
    assert total_input is not None and output is not None  # required=True raised otherwise

    if reasoning is not None and reasoning > output:
        raise FieldError(f"usage.{_OTEL_REASONING[0]}", f"{reasoning} exceeds output ({output})")

    flags: list[str] = []
    cached = (read or 0) + (write or 0)
    if total_input >= cached:
        # The convention: input includes cache reads and writes. (An exclusive count that
        # happens to be larger than the cached part is indistinguishable; we follow the spec.)
        uncached = total_input - cached
    else:
        # Smaller than its own subset: this instrumentation copied Anthropic's exclusive count.
        uncached = total_input
        flags.append(FLAG_OTEL_INPUT_EXCLUSIVE)

    write_5m, write_1h = _by_ttl(write or 0, cache_ttl)
    return _build(
        "otel",
        uncached=uncached,
        read=read or 0,
        write_5m=write_5m,
        write_1h=write_1h,
        output=output,
        reasoning=reasoning,
        reported_cache=read is not None or write is not None,
        flags=flags,
    )


def _otel_count(
    usage: Mapping[str, object], names: tuple[str, ...], *, required: bool = False
) -> int | None:
    """One quantity under any of its names. Aliases that disagree are an error, not a guess.

    Dual emission during the semconv migration sends old and new names with equal values.
    """
    found: tuple[str, int] | None = None
    for name in names:
        if usage.get(name) is None:  # most aliases are absent: no field name made for them
            continue
        value = _optional(usage, name, f"usage.{name}")
        if value is None:
            continue
        if found is not None and found[1] != value:
            raise FieldError(
                f"usage.{name}", f"{value} disagrees with usage.{found[0]} ({found[1]})"
            )
        found = found or (name, value)
    if found is None:
        if required:
            raise FieldError(f"usage.{names[0]}", "is required")
        return None
    return found[1]


# --- helpers -----------------------------------------------------------------------------------


def _build(
    provider: Provider,
    *,
    uncached: int,
    read: int,
    write_5m: int,
    write_1h: int,
    output: int,
    reasoning: int | None,
    reported_cache: bool,
    flags: list[str],
) -> NormalizedUsage:
    # positional, in the fields' order: nine keywords cost more on every call of the ingest path
    return NormalizedUsage(
        provider,
        uncached,
        read,
        write_5m,
        write_1h,
        output,
        reasoning,
        reported_cache,
        tuple(flags),
    )


def _by_ttl(tokens: int, cache_ttl: CacheTTL) -> tuple[int, int]:
    return (tokens, 0) if cache_ttl == "5m" else (0, tokens)


def _required(obj: Mapping[str, object], key: str, field: str) -> int:
    value = _optional(obj, key, field)
    if value is None:
        raise FieldError(field, "is required")
    return value


def _optional(obj: Mapping[str, object], key: str, field: str) -> int | None:
    """The count under `key`; None when absent or JSON null (SDKs serialise unset fields so)."""
    value = obj.get(key)
    if value is None:
        return None
    # bool is an int subclass, and float 12.0 == 12: reject both, they are upstream bugs.
    if type(value) is not int:
        raise FieldError(field, f"must be an integer, got {_type_name(value)}")
    if value < 0:
        raise FieldError(field, f"must not be negative, got {value}")
    if value > MAX_TOKENS:
        raise FieldError(field, f"must be at most {MAX_TOKENS}, got {value}")
    return value


def _mapping(obj: Mapping[str, object], key: str, field: str) -> Mapping[str, object] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise FieldError(field, f"must be an object, got {_type_name(value)}")
    return value


def _check_count(value: object, name: str) -> None:
    if type(value) is not int:
        raise ValueError(f"{name} must be an int, got {_type_name(value)}")
    if not 0 <= value <= MAX_TOKENS:
        raise ValueError(f"{name} must be in [0, {MAX_TOKENS}], got {value}")


def _type_name(value: object) -> str:
    """JSON's name for the type, since that is what the agent sent."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__
