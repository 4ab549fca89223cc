"""The compaction core: a pure, standard-library-only library for the context lifecycle.

Nothing here imports Django, Celery, pydantic or the rest of the project; same inputs give
byte-identical outputs (D1). Decisions D1–D8 are in the ADR 0101 context-lifecycle record.

Messages (`messages.py`)
    `Message(role, blocks, seq, raw, format, content_form, extra, native_role, bound, summarizes)`
    — frozen. role ∈ system|user|assistant|tool; blocks are `TextBlock`, `ToolCall(id, name,
    arguments)`, `ToolResult(call_id, content, is_error, pruned)`, `ThinkingBlock(kind, native)`
    (opaque, signature untouched) and `OpaqueBlock(type, native)` (unknown blocks, verbatim).
    `raw` is the message's JSON text as received (pass JSON strings to keep every byte,
    `\\u0000` included). Derived at construction: `chars` (the content size every estimate
    uses), `call_ids`, `result_ids`, `is_tool_result_carrier`, `marked`, `longest_result`.
    `parse_anthropic(messages, *, system=None, first_seq=None, preceding=(), bound=None)` and
    `parse_openai(messages, *, first_seq=None, preceding=(), bound=None)` take decoded objects or
    JSON strings and validate the batch as the continuation of `preceding` (incremental append);
    `parse_message(item, *, format, seq)` rehydrates one stored row; `validate_transcript(messages,
    *, start=0)` is the O(n) check. Violations raise `TranscriptError(ValueError)` with `.index`,
    `.seq` and a message naming the message and the problem (result without its call, duplicate
    call id, unknown role, malformed block, ...). A trailing call without its result is valid.
    `to_anthropic(messages) -> (system, list[dict])`, `to_openai(messages) -> list[dict]`:
    lossless within a format; across formats only when lossless, else `ConversionError(.reason)`
    (thinking blocks with signatures, unknown blocks/fields, error flags, ...).

Rounds (`rounds.py`)
    `split_rounds(messages) -> tuple[Round(start, stop, call_ids, pending), ...]`: one assistant
    message and the results that answer it. `safe_cuts`, `protected_head_end`,
    `round_growth_chars` (what one more round is expected to add: the largest recent round).

Bounding (`bounding.py`, D3)
    `OMISSION_MARKER = "\\n[... {omitted} chars omitted ...]\\n"` — the one convention, used by
    bounding and by pruning stubs. `bound_text(text, cap)`: head + marker + tail; unchanged at or
    under cap; never longer than cap; idempotent; keeps the first and last characters; tiny caps
    degrade to a one-character marker, `cap < 2` raises ValueError. `BoundSpec(max_result_chars)`
    is recorded on each log message (`Message.bound`, from `parse_*(bound=...)`): the surface
    bounds a message's tool results by the cap in force when it was appended, never by today's.

Tokens (`tokens.py`, D6)
    `CHARS_PER_TOKEN = 4`, `estimate_tokens(chars) = chars // 4` (the one place).
    `Calibration.fit([(request_chars, reported_tokens), ...])`: least squares of
    tokens ≈ slope · chars/4 + overhead; trusted only with ≥5 points, spread in size, slope in
    [0.5, 2] and overhead ≥ 0, else `estimate()` falls back to chars // 4 exactly.

Operations (`operations.py`) — frozen, `to_dict()` / `operation_from_dict()` JSON round trip
    `PruneOperation(results=(PrunedResult(seq, call_id, tool_name, original_chars, stub), ...),
    stub_spec=StubSpec(head_chars, tail_chars))` and `SummarizeOperation(first_seq, last_seq,
    summary, summarizer, message_count)`, and `AgentCompactionOperation(keep_from_seq, source,
    source_key, trigger, summary)`: the agent compacted by itself (Claude Code, Codex), so the
    surface hides every message before `keep_from_seq` but system prompts. They store the stub
    and summary texts, so derivation never calls a model and never re-reads policy.

Surface (`surface.py`)
    `derive_surface(log, operations) -> Surface(messages, chars)`: pure, deterministic, strips
    every `cache_control`, bounds results by their recorded cap, applies stubs and summaries.
    Re-applying operations changes nothing. `derive_surface_at(log, operations, counts)` also
    gives the chars of the surface of each log prefix (seq < count), in the same pass.
    `hidden_seqs(log, operations)`: the messages it leaves out wholly (decided by seq and role).
    `canonical_json(surface_or_messages, *, format=None) -> bytes`: sorted keys, compact, ASCII-escaped; the byte-stability contract of D1.

Pruning (`pruning.py`, D3)
    `plan_prune(messages, *, keep_rounds, stub, exclude_tools) -> PrunePlan(operation,
    freed_chars, first_changed_index)`; the stub (`make_stub`) is
    `STUB_HEADER = "[tool result pruned: {tool} returned {chars} chars; head and tail kept]\\n"`
    + head + marker + tail, in the same block type, call id, error flag and position.
    Never splits a call from its result; never touches system messages, the first user message,
    the tool loop in progress, excluded tools, or a result whose stub would not be shorter.

Summarizing (`summarize.py`, D4)
    `Summarizer` protocol (`name`, `summarize(messages, *, max_tokens) -> str`);
    `ExtractiveSummarizer` is the offline, deterministic default (user goals, each tool call with
    the head of its outcome, the assistant's latest conclusions, within max_tokens × 4 chars).
    An LLM-backed one (`LLMSummarizer`, Anthropic or OpenAI-compatible, stdlib HTTP) lives
    outside the core in `compaction.summarizers`.
    `plan_summarize(messages, *, keep_rounds_verbatim, summary_max_tokens, summarizer)` over
    `summary_span(...)`. The summary message is a **user** message with bare-string content
    in both formats, at the place of the span (after the system prompt and the first user
    message), text `SUMMARY_HEADER` + summary, seq of the first replaced message,
    `summarizes=(first_seq, last_seq)`. The span never strands a result whose call it removed
    and never reaches into the last `keep_rounds_verbatim` rounds or the tool loop in progress.

Relief (`relief_planning.py`, D4)
    `plan_relief(surface, *, policy: ReliefPolicy, mode="normal"|"forced", summarizer=None,
    calibration=None, context_tokens=None, pricing=CachePricing(), growth_tokens=0) ->
    ReliefPlan(action, mode, reason, tokens_before, tokens_after, pressure_before,
    pressure_after, first_changed_index, cache_write_tokens, freed_tokens, operations)`.
    Pressure = tokens / (window_tokens − reserved_output_tokens). From `prune_threshold` (or
    when `tokens + growth_tokens` would cross the window) relief aims at `target_pressure` =
    prune_threshold − relief_hysteresis: prune, then summarize in the same plan when pruning
    alone cannot get there. Worth-it rule on the plan as a whole (`economics.py`, one cache
    re-write per plan): it frees at least `prune_min_free_tokens` and its re-write premium
    `rewrite × (write − read)` is paid back by `freed × read` per later call within
    `pricing.horizon_calls` (the session's typical remaining calls; `pricing.rates` the model's
    $/MTok); it may defer relief only below `summarize_threshold` and while the next call fits.
    Deferred passes are named in `skipped`. Forced mode ignores thresholds and the worth-it
    rule, never safety.

Economics (`economics.py`)
    `CacheRates(input, read, write)`, `pass_economics(freed_tokens, rewrite_tokens, rates,
    remaining_calls, min_free_tokens) -> PassEconomics` (re-write cost and premium, saving per
    later call, break-even calls, worth_it), `net_saving(...)` for the measured outcome.

Log positions (`log_position.py`)
    `LogPosition(seq, hash)`: the log a surface follows. `content_digest(value)` (SHA-256 of a
    message's canonical JSON, its seq left out), `extend_log_hash(previous, digest)` and
    `log_hash(digests, start=LOG_HASH_START)`: a hash chain the console extends per append and
    the client keeps per seq, so a client uses a surface only if it follows what it appended.

Log retention (`log_retention.py`)
    `removable_seqs(rows, operations, *, archived)`: of stored `(seq, role)` rows, those whose
    text retention may remove (hidden from the surface, held by an archive); a removed message
    loads as `removed_message(seq=, role=, format=)` (`is_removed`), which `derive_surface`
    never shows, so the surface keeps its bytes.

Overflow limits (`overflow_limit.py`)
    `parse_overflow_limit(text) -> OverflowLimit(limit, requested) | None`: the window a
    provider's context-length error states (Anthropic's "N tokens > M maximum", OpenAI's
    "maximum context length is M tokens"); `valid_window`, `MAX_WINDOW`.

Relief retries (`relief_retry.py`, D4/D5)
    `retry_backoff_seconds(failures, base_seconds)` (base doubled per failure in a row) and
    `retry_decision(failures, elapsed_seconds, base_seconds, max_attempts) -> "wait" | "retry" |
    "give_up"`: what the sweeper does with a session whose automatic relief keeps failing;
    `retry_wait_seconds(...)`: how long until that rule says "retry" (None: never).

Fingerprints (`fingerprints.py`, D1/D2)
    `surface_fingerprints(surface, format=None, with_text=False) -> (SegmentPrint(name, hash,
    tokens, text), ...)`: `system`, then `message k`; the same shape agents report as `prefix`.
"""

from context_core.bounding import (
    MIN_BOUND_CAP,
    OMISSION_MARKER,
    SHORT_OMISSION_MARKER,
    BoundSpec,
    bound_text,
    omission_marker,
)
from context_core.economics import CacheRates, PassEconomics, net_saving, pass_economics
from context_core.fingerprints import SegmentPrint, readable_text, surface_fingerprints
from context_core.log_position import (
    LOG_HASH_START,
    LogPosition,
    content_digest,
    extend_log_hash,
    log_hash,
)
from context_core.log_retention import is_removed, removable_seqs, removed_message
from context_core.messages import (
    Block,
    ContentBlock,
    ContentForm,
    ConversionError,
    Format,
    Message,
    OpaqueBlock,
    RawMessage,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    TranscriptError,
    parse_anthropic,
    parse_message,
    parse_openai,
    pending_call_ids,
    text_message,
    to_anthropic,
    to_openai,
    validate_transcript,
)
from context_core.operations import (
    AgentCompactionOperation,
    Operation,
    PrunedResult,
    PruneOperation,
    StubSpec,
    SummarizeOperation,
    operation_from_dict,
)
from context_core.overflow_limit import OverflowLimit, parse_overflow_limit
from context_core.pruning import STUB_HEADER, PrunePlan, make_stub, plan_prune
from context_core.relief_planning import (
    CachePricing,
    ReliefPlan,
    ReliefPolicy,
    next_call_crosses,
    plan_relief,
)
from context_core.relief_retry import (
    RetryDecision,
    retry_backoff_seconds,
    retry_decision,
    retry_wait_seconds,
)
from context_core.rounds import (
    Round,
    protected_head_end,
    round_growth_chars,
    safe_cuts,
    split_rounds,
)
from context_core.summarize import (
    SUMMARY_HEADER,
    ExtractiveSummarizer,
    SummarizePlan,
    Summarizer,
    plan_summarize,
    summary_message,
    summary_span,
    summary_text,
)
from context_core.surface import (
    Surface,
    bound_message,
    canonical_json,
    derive_surface,
    derive_surface_at,
    hidden_seqs,
    strip_cache_control,
)
from context_core.tokens import CHARS_PER_TOKEN, Calibration, estimate_tokens

__all__ = [
    "RetryDecision",
    "retry_backoff_seconds",
    "retry_decision",
    "retry_wait_seconds",
    "parse_overflow_limit",
    "OverflowLimit",
    "log_hash",
    "extend_log_hash",
    "content_digest",
    "LogPosition",
    "LOG_HASH_START",
    "AgentCompactionOperation",
    "CHARS_PER_TOKEN",
    "MIN_BOUND_CAP",
    "OMISSION_MARKER",
    "SHORT_OMISSION_MARKER",
    "STUB_HEADER",
    "SUMMARY_HEADER",
    "Block",
    "BoundSpec",
    "CachePricing",
    "CacheRates",
    "Calibration",
    "ContentBlock",
    "ContentForm",
    "ConversionError",
    "ExtractiveSummarizer",
    "Format",
    "Message",
    "OpaqueBlock",
    "PassEconomics",
    "Operation",
    "PruneOperation",
    "PrunePlan",
    "PrunedResult",
    "RawMessage",
    "SegmentPrint",
    "ReliefPlan",
    "ReliefPolicy",
    "Role",
    "Round",
    "StubSpec",
    "SummarizeOperation",
    "SummarizePlan",
    "Summarizer",
    "Surface",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolResult",
    "TranscriptError",
    "bound_message",
    "bound_text",
    "canonical_json",
    "derive_surface",
    "derive_surface_at",
    "estimate_tokens",
    "hidden_seqs",
    "is_removed",
    "removable_seqs",
    "removed_message",
    "make_stub",
    "net_saving",
    "omission_marker",
    "operation_from_dict",
    "parse_anthropic",
    "parse_message",
    "parse_openai",
    "pass_economics",
    "pending_call_ids",
    "plan_prune",
    "next_call_crosses",
    "plan_relief",
    "plan_summarize",
    "protected_head_end",
    "readable_text",
    "round_growth_chars",
    "safe_cuts",
    "split_rounds",
    "strip_cache_control",
    "summary_message",
    "summary_span",
    "summary_text",
    "surface_fingerprints",
    "text_message",
    "to_anthropic",
    "to_openai",
    "validate_transcript",
]
