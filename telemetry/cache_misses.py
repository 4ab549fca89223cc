"""Why each prompt-cache miss happened, and what it cost (D1, D2). Standard library only.

A session's calls, ordered by their position (turn, call), are compared pairwise. The previous
call made a prefix cacheable: what it read plus what it wrote (Anthropic), or its whole prompt
(OpenAI's automatic caching, which reports no writes). The current call should read that prefix
back, up to its own size (a smaller request, after a compaction, cannot read what it no longer
sends). A *miss* is the shortfall when it reaches both `MISS_FLOOR_TOKENS` and `MISS_FLOOR_SHARE`
of the expectation; its *premium* is what re-buying those tokens cost over reading them: missed
tokens × (the write or input rate they were paid at − the read rate), at the current call's
model's rates.

The cause is the first that holds, in this order (DESIGN "Cache discipline"):

1. `model_switch` — the model differs from the previous call's (caches are per model);
2. `expiry` — the gap since the previous call (the last one that touched the prefix) exceeds the
   life of the tier the prefix was written to (5m, 1h; OpenAI's automatic cache: 5 minutes).
   Never claimed when the gap is within that life;
3. `our_compaction` — one of our compaction runs changed the surface between the two calls;
4. `agent_compaction` — the agent or the provider compacted (a recorded context event);
5. `prefix_break` — the prefix fingerprints of the two calls differ at a named segment (tools,
   system, message k) inside the cached part;
6. `unexplained` — eviction, or a volatile prefix we cannot see.

When the provider diagnosed the call itself (`CallObs.provider`, `telemetry.cache_diagnostics`:
Anthropic's `cache_miss_reason`, OpenAI's `prompt_cache_diagnostics`), its verdict is the miss's
cause and the cause found above stays as `Miss.inferred_cause`; a provider word without verdict
leaves ours the cause.

Everything here is a pure function of its arguments: the records' arrival order never changes
the outcome (calls are sorted by position, events by time and id).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, localcontext
from operator import attrgetter
from typing import Final, Literal

from context_core.economics import MONEY, PER_MILLION
from telemetry.cache_diagnostics import ProviderDiagnosis, agrees, describe
from telemetry.pricing import ModelPrice, Rates
from telemetry.usage import INPUT_BUCKETS

Cause = Literal[
    "model_switch", "expiry", "our_compaction", "agent_compaction", "prefix_break", "unexplained"
]
CAUSES: Final[tuple[Cause, ...]] = (
    "model_switch",
    "expiry",
    "our_compaction",
    "agent_compaction",
    "prefix_break",
    "unexplained",
)
CAUSE_LABELS: Final[Mapping[Cause, str]] = {
    "model_switch": "model switched",
    "expiry": "cache expired",
    "our_compaction": "our compaction",
    "agent_compaction": "agent/provider compaction",
    "prefix_break": "prefix changed",
    "unexplained": "unexplained",
}
Tier = Literal["5m", "1h", "auto"]
TIER_LIFE: Final[Mapping[Tier, timedelta]] = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    # OpenAI keeps an idle prefix 5-10 minutes (always under an hour): 5 is the least it promises.
    "auto": timedelta(minutes=5),
}
TIER_LABELS: Final[Mapping[Tier, str]] = {
    "5m": "5-minute tier",
    "1h": "1-hour tier",
    "auto": "OpenAI automatic cache (5-10 min idle)",
}
MISS_FLOOR_TOKENS: Final = 1024
MISS_FLOOR_SHARE: Final = 0.05
# OpenAI caches prompts of 1,024 tokens or more only.
AUTOMATIC_MIN_PROMPT: Final = 1024
# D2: a profile whose system segment changes on more than this share of consecutive calls, with
# at least `D2_MIN_PAIRS` comparable pairs, is flagged.
D2_CHURN_SHARE: Final = 0.5
D2_MIN_PAIRS: Final = 3
DIFF_LINES: Final = 12
D2_HINT: Final = "volatile context: move it into the message stream (D2)"


@dataclass(frozen=True, slots=True)
class Segment:
    """One prefix segment: `name` is `tools`, `system` or `message k`; `text` when known."""

    name: str
    hash: str
    tokens: int
    text: str | None = None


@dataclass(slots=True)
class CallObs:
    """One call as the classifier sees it (buckets are disjoint, as stored). Not changed once
    built; not frozen, as a frozen dataclass sets each field through `object.__setattr__` and a
    report builds one per call (100,000 for make bench's P12), at several times the cost.

    `automatic` says the provider caches on its own without reporting writes (OpenAI): the whole
    prompt is then what the call made cacheable. `prefix` is the call's prefix fingerprints, from
    the agent's record or from the surface version it used; None when unknown.

    `context` is the request's size as stored with the call (`LLMCall.context_tokens`,
    `telemetry.usage.context_size` of all its input buckets, whichever there are). None (an
    observation built by hand): the sum of the input buckets this class carries, the others
    (`telemetry.usage.INPUT_BUCKETS`) counted as 0. The classifier never names a bucket it does
    not tell apart, so a new input bucket changes nothing here.
    """

    turn: int
    call: int
    at: datetime
    model: str
    uncached_input: int
    cache_read: int
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    reported_cache: bool = True
    automatic: bool = False
    surface_version: int | None = None
    prefix: tuple[Segment, ...] | None = None
    context: int | None = None
    # What the provider said about this request's cache (`telemetry.cache_diagnostics`).
    provider: ProviderDiagnosis | None = None

    @property
    def key(self) -> tuple[int, int]:
        return (self.turn, self.call)

    @property
    def written(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @property
    def context_tokens(self) -> int:
        """The size of this request's input (`telemetry.usage.context_size`)."""
        if self.context is not None:
            return self.context
        return sum(getattr(self, name, 0) for name in INPUT_BUCKETS)

    @property
    def cacheable(self) -> int:
        """The prefix this call leaves in the cache for the next one."""
        if self.automatic:
            size = self.uncached_input + self.cache_read
            return size if size >= AUTOMATIC_MIN_PROMPT else 0
        return self.cache_read + self.written


@dataclass(frozen=True, slots=True)
class SurfaceChange:
    """One of our compaction runs that changed the surface (applied)."""

    run_id: int
    at: datetime
    mode: str
    action: str
    version_before: int | None = None
    version_after: int | None = None


@dataclass(frozen=True, slots=True)
class ContextChange:
    """An agent's or provider's compaction or context edit (a `ContextEvent`)."""

    event_id: int
    at: datetime
    origin: str
    kind: str
    source: str = ""
    trigger: str = ""
    call: tuple[int, int] | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None


@dataclass(frozen=True, slots=True)
class Break:
    """Where two prefixes first differ: the segment (named as in `after`, else `before`), how many
    tokens precede it, and both versions of it (None when absent on one side)."""

    index: int
    name: str
    tokens_before: int
    before: Segment | None
    after: Segment | None


@dataclass(frozen=True, slots=True)
class Miss:
    """One call that read less of the cache than the previous call left it.

    `premium_usd` is None only when the model has no catalogue price. `evidence` is the
    operator-readable why; `detail` the same facts as data (gap seconds, tier, run id, segment,
    diff lines), for the API. Both are our own reading.

    `cause` is THE cause: the provider's (`provider`, `telemetry.cache_diagnostics`) when it gave
    a verdict, else ours; `inferred_cause` is ours either way.
    """

    turn: int
    call: int
    at: datetime
    model: str
    expected_tokens: int
    read_tokens: int
    missed_tokens: int
    premium_usd: Decimal | None
    cause: Cause
    evidence: str
    detail: Mapping[str, object] = field(default_factory=dict)
    inferred_cause: Cause | None = None  # ours; None (the constructor's default): `cause`
    provider: ProviderDiagnosis | None = None

    def __post_init__(self) -> None:
        if self.inferred_cause is None:
            object.__setattr__(self, "inferred_cause", self.cause)

    @property
    def cause_label(self) -> str:
        return CAUSE_LABELS[self.cause]

    @property
    def ours(self) -> Cause:
        return self.inferred_cause or self.cause

    @property
    def provider_cause(self) -> Cause | None:
        return None if self.provider is None else self.provider.cause

    @property
    def agrees(self) -> bool | None:
        """Whether our cause agrees with the provider's; None without a provider verdict."""
        theirs = self.provider_cause
        if theirs is None or self.provider is None:
            return None
        return agrees(theirs, self.ours, self.provider.meaning.segment)

    @property
    def readings(self) -> str | None:
        """Both readings in words, `provider: messages_changed, 12,016 tokens; ours:
        prefix_break at message 41`; None when the provider said nothing of this call."""
        if self.provider is None:
            return None
        segment = self.detail.get("segment") if self.ours == "prefix_break" else None
        where = f" at {segment}" if segment else ""
        return f"{describe(self.provider)}; ours: {self.ours}{where}"


_POSITION = attrgetter("turn", "call")  # C-speed sort key (100,000 calls a report)


def ordered(calls: Iterable[CallObs]) -> list[CallObs]:
    """Calls in position order (turn, call): the classifier's one order, whatever the arrival."""
    return sorted(calls, key=_POSITION)


def expected_read(previous: CallObs, current: CallObs) -> int:
    """What `current` should read from the cache: `previous.cacheable`, at most its own size."""
    return min(previous.cacheable, current.context_tokens)


def is_miss(expected: int, read: int) -> bool:
    """A shortfall counts when it reaches both floors: 1,024 tokens and 5 % of the expectation."""
    missed = expected - read
    return missed >= MISS_FLOOR_TOKENS and missed >= expected * MISS_FLOOR_SHARE


def premium(current: CallObs, missed: int, price: ModelPrice | None) -> Decimal | None:
    """What re-buying `missed` tokens cost over reading them, at `current`'s rates.

    The missed tokens were paid as this call's cache writes first (1-hour entries precede
    5-minute ones in a request), the rest as uncached input; each at (its rate − read rate).
    A provider without a write surcharge bills writes as input.
    """
    if price is None:
        return None
    return premium_at(current, missed, price.rates_for(current.context_tokens))


def premium_at(current: CallObs, missed: int, rates: Rates | None) -> Decimal | None:
    """`premium` at given rates (None: unpriced)."""
    if rates is None:
        return None
    from_writes = min(missed, current.written)
    from_1h = min(from_writes, current.cache_write_1h)
    from_5m = from_writes - from_1h
    rest = missed - from_writes
    write_1h = rates.cache_write_1h if rates.cache_write_1h is not None else rates.input
    write_5m = rates.cache_write_5m if rates.cache_write_5m is not None else rates.input
    with localcontext(MONEY):
        total = (
            Decimal(from_1h) * (write_1h - rates.cache_read)
            + Decimal(from_5m) * (write_5m - rates.cache_read)
            + Decimal(rest) * (rates.input - rates.cache_read)
        )
        return max(total, Decimal(0)) / PER_MILLION


def prefix_tier(history: Sequence[CallObs]) -> Tier:
    """The tier the cached prefix was written to: that of the latest call that wrote.

    A call that wrote both tiers counts as 1 hour (its 1-hour part outlives the 5-minute part;
    the longer life never blames expiry wrongly). No writes: OpenAI's automatic cache, or the
    5-minute default for a provider that reports writes.
    """
    for call in reversed(history):
        if call.cache_write_1h > 0:
            return "1h"
        if call.cache_write_5m > 0:
            return "5m"
    if history and history[-1].automatic:
        return "auto"
    return "5m"


def break_point(before: Sequence[Segment], after: Sequence[Segment]) -> Break | None:
    """The first segment where two prefixes differ (by name or hash), or None when one is a
    prefix of the other (growth at the end is not a break).

    A `tools` segment present on one side only is ignored (one source may not see the tools).
    """
    has_tools = {s.name == "tools" for s in before[:1]} | {s.name == "tools" for s in after[:1]}
    if has_tools == {True, False}:
        before = [s for s in before if s.name != "tools"]
        after = [s for s in after if s.name != "tools"]
    tokens = 0
    for index in range(min(len(before), len(after))):
        old, new = before[index], after[index]
        if old.name != new.name or old.hash != new.hash:
            return Break(index, new.name, tokens, old, new)
        tokens += old.tokens
    if len(after) < len(before):
        # The newer prefix lost segments at its end: the first lost one is where it changed.
        index = len(after)
        return Break(index, before[index].name, tokens, before[index], None)
    return None


_VOLATILE = re.compile(
    r"\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}|\b[0-9a-f]{8}-[0-9a-f]{4}-|\b\d{9,}\b", re.IGNORECASE
)


def segment_diff(before: str, after: str, *, limit: int = DIFF_LINES) -> tuple[str, ...]:
    """The changed lines of a segment, `- old` / `+ new`, at most `limit` of them."""
    lines = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return tuple(lines[:limit])


def looks_volatile(diff: Sequence[str]) -> bool:
    """Whether the changed lines carry clock or id values (a timestamp, a date, a uuid)."""
    return any(_VOLATILE.search(line) for line in diff)


def classify(
    calls: Iterable[CallObs],
    *,
    prices: Mapping[str, ModelPrice | None],
    surface_changes: Iterable[SurfaceChange] = (),
    context_changes: Iterable[ContextChange] = (),
) -> list[Miss]:
    """Every miss of one session with its cause and premium, in position order.

    Pure: the same calls and events in any order give the same list. Calls without cache
    figures (`reported_cache` False) neither expect nor are expected anything.
    """
    ours = sorted(surface_changes, key=lambda c: (c.at, c.run_id))
    theirs = sorted(context_changes, key=lambda c: (c.at, c.event_id))
    history = ordered(calls)
    rates: dict[tuple[str, bool], Rates | None] = {}
    misses: list[Miss] = []
    written_tier: Tier | None = None  # the tier of the latest call that wrote, so far
    for index in range(1, len(history)):
        previous, current = history[index - 1], history[index]
        if previous.cache_write_1h > 0:
            written_tier = "1h"
        elif previous.cache_write_5m > 0:
            written_tier = "5m"
        if not (previous.reported_cache and current.reported_cache):
            continue
        # the hot path (most calls are no miss): expected_read and is_miss, inlined
        size = current.context_tokens
        cacheable = previous.cacheable
        expected = cacheable if cacheable < size else size
        missed = expected - current.cache_read
        if missed < MISS_FLOOR_TOKENS or missed < expected * MISS_FLOOR_SHARE:
            continue
        tier: Tier = written_tier or ("auto" if previous.automatic else "5m")
        cause, evidence, detail = _cause(previous, current, tier, ours, theirs, expected)
        provider = current.provider
        verdict = None if provider is None else provider.cause
        misses.append(
            Miss(
                turn=current.turn,
                call=current.call,
                at=current.at,
                model=current.model,
                expected_tokens=expected,
                read_tokens=current.cache_read,
                missed_tokens=missed,
                premium_usd=_premium(current, missed, prices.get(current.model), rates),
                # the provider's verdict, when it gave one, is the cause; ours stays inferred
                cause=cause if verdict is None else verdict,
                evidence=evidence,
                detail=detail,
                inferred_cause=cause,
                provider=provider,
            )
        )
    return misses


def _premium(
    current: CallObs,
    missed: int,
    price: ModelPrice | None,
    cache: dict[tuple[str, bool], Rates | None],
) -> Decimal | None:
    if price is None:
        return None
    long = price.in_long_context(current.context_tokens)
    key = (price.model, long)
    if key not in cache:
        cache[key] = price.rates_for(current.context_tokens)
    return premium_at(current, missed, cache[key])


def format_gap(gap: timedelta) -> str:
    seconds = max(int(gap.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s"


def _cause(
    previous: CallObs,
    current: CallObs,
    tier: Tier,
    ours: Sequence[SurfaceChange],
    theirs: Sequence[ContextChange],
    expected: int,
) -> tuple[Cause, str, dict[str, object]]:
    if previous.model != current.model:
        return (
            "model_switch",
            f"model switched from {previous.model} to {current.model}: caches are per model",
            {"from_model": previous.model, "to_model": current.model},
        )
    gap = current.at - previous.at
    life = TIER_LIFE[tier]
    if gap > life:
        return (
            "expiry",
            f"{format_gap(gap)} since the last call exceeds the {TIER_LABELS[tier]} "
            f"the prefix was written to",
            {"gap_seconds": int(gap.total_seconds()), "tier": tier},
        )
    run = _our_change(ours, previous, current)
    if run is not None:
        versions = (
            f" (surface v{run.version_before} → v{run.version_after})"
            if run.version_before is not None and run.version_after is not None
            else ""
        )
        return (
            "our_compaction",
            f"our {run.mode} {run.action or 'compaction'} (run {run.run_id}) changed the "
            f"surface{versions}",
            {"run_id": run.run_id, "mode": run.mode, "action": run.action},
        )
    event = _their_change(theirs, previous, current)
    if event is not None:
        sizes = (
            f", {event.tokens_before:,} → {event.tokens_after:,} tokens"
            if event.tokens_before is not None and event.tokens_after is not None
            else ""
        )
        how = f" ({event.trigger})" if event.trigger else ""
        via = f" via {event.source}" if event.source else ""
        return (
            "agent_compaction",
            f"the {event.origin} {event.kind.replace('_', ' ')}{how}, reported{via}{sizes}",
            {"event_id": event.event_id, "origin": event.origin, "kind": event.kind},
        )
    if previous.prefix is not None and current.prefix is not None:
        found = break_point(previous.prefix, current.prefix)
        if found is not None and found.tokens_before < expected:
            return _prefix_break(found, current)
        return (
            "unexplained",
            "the prefix fingerprints match up to the cached length: evicted by the provider",
            {"fingerprints": "match"},
        )
    return (
        "unexplained",
        f"same model, {format_gap(gap)} gap within the {TIER_LABELS[tier]}, no compaction; "
        "no prefix fingerprints: eviction, or a volatile prefix we cannot see",
        {"gap_seconds": int(gap.total_seconds()), "tier": tier},
    )


def _prefix_break(found: Break, current: CallObs) -> tuple[Cause, str, dict[str, object]]:
    rewritten = max(current.context_tokens - found.tokens_before - current.cache_read, 0)
    evidence = (
        f"the prefix changed at {found.name} (~{found.tokens_before:,} tokens in); "
        f"~{rewritten:,} tokens from there were re-sent"
    )
    detail: dict[str, object] = {"segment": found.name, "tokens_before": found.tokens_before}
    old = found.before.text if found.before is not None else None
    new = found.after.text if found.after is not None else None
    if old is not None and new is not None:
        diff = segment_diff(old, new)
        detail["diff"] = list(diff)
        if diff:
            evidence += ": " + " / ".join(diff[:4])
        if found.name == "system" and looks_volatile(diff):
            evidence += f" — {D2_HINT}"
    elif found.name == "system":
        evidence += f" — {D2_HINT}"
    return "prefix_break", evidence, detail


def _our_change(
    ours: Sequence[SurfaceChange], previous: CallObs, current: CallObs
) -> SurfaceChange | None:
    before, after = previous.surface_version, current.surface_version
    for run in ours:
        if (
            before is not None
            and after is not None
            and run.version_before is not None
            and run.version_after is not None
        ):
            if before <= run.version_before and run.version_after <= after:
                return run
        elif previous.at < run.at <= current.at:
            return run
    return None


def _their_change(
    theirs: Sequence[ContextChange], previous: CallObs, current: CallObs
) -> ContextChange | None:
    if not theirs:
        return None
    keys = (previous.key, current.key)
    for event in theirs:
        if event.call is not None and event.call in keys:
            return event
    for event in theirs:
        if event.call is None and previous.at < event.at <= current.at:
            return event
    return None


# --- D2: system segments that churn ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SystemChurn:
    """Consecutive call pairs whose system segments were both known, and how many changed."""

    pairs: int
    changed: int

    @property
    def share(self) -> float | None:
        return self.changed / self.pairs if self.pairs else None

    @property
    def violates_d2(self) -> bool:
        """The system segment changes on most calls: volatile data sits in the system block."""
        return self.pairs >= D2_MIN_PAIRS and self.changed > self.pairs * D2_CHURN_SHARE

    def __add__(self, other: SystemChurn) -> SystemChurn:
        return SystemChurn(self.pairs + other.pairs, self.changed + other.changed)


def system_churn(calls: Iterable[CallObs]) -> SystemChurn:
    """Count, over consecutive calls in position order, how often the system segment changed."""
    pairs = changed = 0
    previous_hash: str | None = None
    for call in ordered(calls):
        current_hash = _system_hash(call)
        if previous_hash is not None and current_hash is not None:
            pairs += 1
            changed += previous_hash != current_hash
        previous_hash = current_hash
    return SystemChurn(pairs, changed)


def _system_hash(call: CallObs) -> str | None:
    if call.prefix is None:
        return None
    for segment in call.prefix:
        if segment.name == "system":
            return segment.hash
    return None


def premiums_by_cause(misses: Iterable[Miss]) -> dict[Cause, Decimal]:
    """Σ premium per cause (every cause present, zero when none); unpriced misses add nothing."""
    totals: dict[Cause, Decimal] = dict.fromkeys(CAUSES, Decimal(0))
    with localcontext(MONEY):
        for miss in misses:
            if miss.premium_usd is not None:
                totals[miss.cause] += miss.premium_usd
    return totals


# --- the TTL advisor ------------------------------------------------------------------------------


def ttl_advice(tier: str, expiry: Sequence[tuple[int, Decimal | None]]) -> str | None:
    """What the measured expiry misses say about a profile's TTL tier, or None without any.

    `expiry` holds each expiry miss's gap (seconds) and premium. On the 5-minute tier, misses
    after gaps under an hour are what the 1-hour tier would have kept; gaps over an hour expire
    on both tiers.
    """
    if not expiry:
        return None
    hour = TIER_LIFE["1h"].total_seconds()
    within = [(gap, p or Decimal(0)) for gap, p in expiry if gap <= hour]
    beyond = len(expiry) - len(within)
    premium_within = sum((p for _, p in within), Decimal(0))
    if tier == "5m" and within:
        advice = (
            f"{len(within)} of {len(expiry)} expiry misses followed gaps under an hour "
            f"(${premium_within:.4f} in premiums): the 1h tier would have kept those prefixes, "
            "at 2× instead of 1.25× the input price per write"
        )
        if beyond:
            advice += f"; {beyond} followed gaps over an hour, which expire on either tier"
        return advice
    return (
        f"{len(expiry)} expiry miss{'es' if len(expiry) != 1 else ''} followed gaps over an "
        "hour: no tier keeps a cache that long"
        if beyond == len(expiry)
        else f"{len(expiry)} expiry misses on the {tier} tier"
    )
