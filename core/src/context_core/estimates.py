"""Estimates from the session's own data (D6): tokens per character by content kind, and the
size of the next request after a compaction. Standard library only.

Tool results (logs, code, JSON) tokenize denser than prose: about 3 characters a token where
prose runs near 4. So the session learns two rates, tokens per character of tool results and of
everything else, from its own steps: each step is what the agent appended between a call's
reply and its next call (characters by kind, from the log) against what that next call measured
beyond the call and its re-sent reply (`step_tokens`, the projection read backwards). Too few
steps, or rates outside the sane range, fall back to chars // 4 exactly.

After a compaction the next request is the measured one less the learned tokens of what the
compaction removed, plus those of what it wrote (stubs, summaries), less the overhead it
removes: content the agent sends that the log never saw (a first prompt's injected context) is
overhead only as long as the messages it came with are on the surface. The session's calls
show how much of it survives a compaction (`overhead_removed`); nothing is assumed removed
until they do.

`fit_surface` (an affine fit of measured context on surface characters) remains the
calibration of what a planner frees (`context_core.tokens.Calibration`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from context_core.messages import Message
from context_core.tokens import CHARS_PER_TOKEN, Calibration, estimate_tokens

EstimateMethod = Literal["fit", "rule"]

# A fit needs this many calls on distinct surfaces; fewer describe the noise, not the session.
MIN_FIT_CALLS = 4

# Rates are trusted from this many steps on: fewer describe one round, not the session.
MIN_RATE_STEPS = 3
# Tokens per character a tokenizer can plausibly give (10 chars a token to 1.5 tokens a char,
# CJK text included); a step or a rate outside it measured something else (a compaction, a
# truncated usage report).
SANE_RATE = (0.1, 1.5)
# Two kinds are told apart only when the steps mix them differently enough: with the kinds'
# shares nearly proportional in every step (correlation² above this), one rate serves both.
_COLLINEAR = 0.98


@dataclass(frozen=True, slots=True)
class KindChars:
    """Characters by content kind: `tool` (tool results) and `prose` (everything else:
    prompts, replies, tool calls' arguments, thinking)."""

    tool: int = 0
    prose: int = 0

    @property
    def total(self) -> int:
        return self.tool + self.prose

    def __add__(self, other: KindChars) -> KindChars:
        return KindChars(self.tool + other.tool, self.prose + other.prose)

    def __sub__(self, other: KindChars) -> KindChars:
        return KindChars(self.tool - other.tool, self.prose - other.prose)


def message_kind_chars(message: Message) -> KindChars:
    """A message's `chars` split by kind: its tool results' characters are `tool`, the rest
    `prose`. The parts always sum to `message.chars`."""
    tool = sum(block.chars for block in message.tool_results)
    return KindChars(tool, message.chars - tool)


def kind_chars(messages: Iterable[Message]) -> KindChars:
    """The characters of `messages` by kind (the sum of `message_kind_chars`)."""
    total = KindChars()
    for message in messages:
        total += message_kind_chars(message)
    return total


def appended_after_reply(rows: Iterable[tuple[str, int, int | None]]) -> KindChars:
    """What a request adds after the previous call's reply, by kind: of the log's messages
    from that call's request on, (role, chars, tool chars or None for unrecorded = prose) in
    seq order, everything after the first assistant message (the reply, counted as output);
    nothing when no reply is there yet."""
    total, seen_reply = KindChars(), False
    for role, chars, tool in rows:
        if not seen_reply:
            seen_reply = role == "assistant"
            continue
        tool = min(tool or 0, chars)
        total += KindChars(tool, chars - tool)
    return total


@dataclass(frozen=True, slots=True)
class TokenRates:
    """Tokens per character of tool results and of prose, learned from the session's steps.

    `fitted` is False when there were too few steps or the rates were not sane; `tokens` is then
    `estimate_tokens` of the total exactly (chars // 4), and `reason` says why.
    """

    tool: float = 1 / CHARS_PER_TOKEN
    prose: float = 1 / CHARS_PER_TOKEN
    steps: int = 0
    fitted: bool = False
    reason: str = "not fitted"

    def tokens(self, chars: KindChars) -> int:
        """Tokens of `chars` (negative parts count as 0). Never negative."""
        tool, prose = max(chars.tool, 0), max(chars.prose, 0)
        if not self.fitted:
            return estimate_tokens(tool + prose)
        return round(self.tool * tool + self.prose * prose)

    def tokens_of_mixed(self, chars: int) -> int:
        """Tokens of `chars` whose kinds are not known: at the mean of the two rates."""
        if not self.fitted:
            return estimate_tokens(chars)
        return round((self.tool + self.prose) / 2 * max(chars, 0))


def step_tokens(
    *, context_tokens: int, output: int, reasoning_output: int | None, next_context_tokens: int
) -> int:
    """What a call's next call measured beyond it: next context − context − the re-sent reply
    (output less reasoning, which is not re-sent). The projection (`telemetry.pressure`) adds
    exactly this much for the appended characters, so rates fitted on it make the projection
    right on the steps they were fitted on. Negative when something shrank the request between
    the calls (a compaction): not a step of appending."""
    return next_context_tokens - context_tokens - (output - (reasoning_output or 0))


def _sane(rate: float) -> bool:
    return SANE_RATE[0] <= rate <= SANE_RATE[1]


def fit_token_rates(
    steps: Sequence[tuple[KindChars, int]], *, min_steps: int = MIN_RATE_STEPS
) -> TokenRates:
    """Least squares through the origin of measured step tokens on appended characters by kind.

    Steps with no characters, or whose own tokens per character is outside SANE_RATE (a
    compaction, a truncated report), are left out. With both kinds present and mixed
    differently across steps, two rates; mixed alike, one rate for both; with one kind only,
    its rate, the other kind keeping chars // 4's. Not fitted (chars // 4 exactly) with fewer
    than `min_steps` usable steps or a rate outside SANE_RATE. Deterministic.
    """
    usable = [
        (chars, tokens)
        for chars, tokens in steps
        if chars.tool >= 0 and chars.prose >= 0 and chars.total > 0 and _sane(tokens / chars.total)
    ]
    n = len(usable)
    if n < min_steps:
        return TokenRates(steps=n, reason=f"{n} usable steps, {min_steps} needed")
    s_tt = float(sum(c.tool * c.tool for c, _ in usable))
    s_pp = float(sum(c.prose * c.prose for c, _ in usable))
    s_tp = float(sum(c.tool * c.prose for c, _ in usable))
    s_ty = float(sum(c.tool * y for c, y in usable))
    s_py = float(sum(c.prose * y for c, y in usable))
    default = 1 / CHARS_PER_TOKEN
    if s_pp == 0 or s_tt == 0:
        # one kind only: its rate is learned, the other keeps chars // 4's
        only = s_ty / s_tt if s_pp == 0 else s_py / s_pp
        if not _sane(only):
            return TokenRates(steps=n, reason=f"rate {only:.3f} outside {SANE_RATE}")
        if s_pp == 0:
            return TokenRates(only, default, n, True, "tool results only")
        return TokenRates(default, only, n, True, "prose only")
    det = s_tt * s_pp - s_tp * s_tp
    if s_tp * s_tp < _COLLINEAR * s_tt * s_pp:
        tool = (s_ty * s_pp - s_py * s_tp) / det
        prose = (s_py * s_tt - s_ty * s_tp) / det
        if _sane(tool) and _sane(prose):
            return TokenRates(tool, prose, n, True, "two rates")
    one = (s_ty + s_py) / (s_tt + 2 * s_tp + s_pp)
    if not _sane(one):
        return TokenRates(steps=n, reason=f"rate {one:.3f} outside {SANE_RATE}")
    return TokenRates(one, one, n, True, "one rate")


def overhead_removed(residuals_before: Sequence[int], residuals_after: Sequence[int]) -> int | None:
    """How much of the overhead (a request's tokens its log characters do not explain) a
    compaction removes, from the session's own calls.

    `residuals_before`: measured context − learned tokens of the surface, of calls on the
    current surface's messages; `residuals_after`: the same of calls made right after earlier
    compactions that removed the surface's first messages. The removed overhead is the
    difference of their medians, never negative; None when either is empty (nothing is known
    removed).
    """
    if not residuals_before or not residuals_after:
        return None
    return max(_median(residuals_before) - _median(residuals_after), 0)


def _median(values: Sequence[int]) -> int:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2


@dataclass(frozen=True, slots=True)
class PostCompactionEstimate:
    tokens: int
    method: EstimateMethod


def post_compaction_estimate(
    rates: TokenRates,
    *,
    tokens_before: int,
    before: KindChars,
    after: KindChars,
    removed_overhead: int = 0,
) -> PostCompactionEstimate:
    """The next request's size after a compaction took the surface from `before` to `after`
    characters (by kind), from `tokens_before`, the measured size of a request on `before`.

    tokens_before − tokens(what left) + tokens(what came: stubs, summaries) −
    `removed_overhead`, by kind at the session's learned rates ("fit"); without them
    (chars // 4, "rule") the net characters freed at once, as the planner frees them. Never
    negative; a compaction that frees nothing and removes no overhead estimates `tokens_before`.
    """
    d_tool, d_prose = before.tool - after.tool, before.prose - after.prose
    if rates.fitted:
        left = KindChars(max(d_tool, 0), max(d_prose, 0))
        came = KindChars(max(-d_tool, 0), max(-d_prose, 0))
        freed = rates.tokens(left) - rates.tokens(came)
        method: EstimateMethod = "fit"
    else:
        net = d_tool + d_prose
        freed = estimate_tokens(net) - estimate_tokens(-net)
        method = "rule"
    return PostCompactionEstimate(max(tokens_before - freed - max(removed_overhead, 0), 0), method)


def drops_head(before: Sequence[Message], after: Sequence[Message]) -> bool:
    """Whether a compaction from `before` to `after` took the surface's first conversation
    message (the first that is not a system prompt) off it: overhead the agent sent with that
    message goes with it. A summary standing in its place does not keep it."""
    first = next((m for m in before if m.role != "system"), None)
    if first is None:
        return False
    kept = next((m for m in after if m.role != "system"), None)
    return kept is None or kept.seq != first.seq or kept.summarizes is not None


def fit_surface(
    points: Sequence[tuple[int, int]], *, min_points: int = MIN_FIT_CALLS
) -> Calibration:
    """Least squares over (surface chars the call used, measured context tokens).

    The same affine fit as `Calibration.fit` (tokens ≈ slope · chars/4 + overhead, slope =
    4 × tokens per char), trusted with at least `min_points` points, a spread in size, a slope
    in the sane range and a non-negative overhead; otherwise `fitted` is False.
    """
    return Calibration.fit(points, min_points=min_points)


def tokens_per_char(calibration: Calibration) -> float:
    """The fitted tokens per character (1/4 when not fitted: the chars // 4 rule)."""
    return calibration.slope / CHARS_PER_TOKEN if calibration.fitted else 1 / CHARS_PER_TOKEN


def estimate_error(estimate: int, measured: int) -> float | None:
    """(estimate − measured) / measured: +0.10 means 10 % too high. None when measured is 0."""
    if measured <= 0:
        return None
    return (estimate - measured) / measured
