"""Provider-side compaction and context editing in a call's report (pure, standard library).

- **Anthropic compaction** (`compact_20260112`, on-demand compaction): `usage.iterations` lists
  every sampling pass, `{"type": "compaction", …}` for the summarization and `{"type":
  "message", …}` for the answer. The top-level usage leaves the compaction pass out, so the
  call is billed as the *sum of every iteration* (each at the tier its own input size selects),
  and the request the model answered — the call's context — is the *final* iteration's input.
  A compaction iteration is a compaction with tokens before (its own input: the context it
  summarized) and after (the next iteration's input).
- **Anthropic context editing**: the response's `context_management.applied_edits` lists each
  edit (`clear_tool_uses_20250919`: `cleared_tool_uses`, `cleared_input_tokens`;
  `clear_thinking_20251015`: `cleared_thinking_turns`, `cleared_input_tokens`). The call's input
  is after the edit, so tokens before = context + cleared tokens.
- **OpenAI compaction**: a Responses output item `{"type": "compaction", "id": …}` (from
  automatic compaction or `POST /v1/responses/compact`, whose usage is an ordinary Responses
  usage, billed as such). Tokens before = the call's context; after is not reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from telemetry.errors import FieldError
from telemetry.usage import CacheTTL, NormalizedUsage, normalize_usage

EventKind = Literal["compaction", "context_edit"]

# `flags` value on a call billed from its iterations.
FLAG_BILLED_ITERATIONS: Final = "billed_iterations"

# The per-edit counts kept in an event's detail (anything else in the edit is kept as well).
_EDIT_COUNTS: Final = ("cleared_tool_uses", "cleared_thinking_turns", "cleared_input_tokens")


@dataclass(frozen=True, slots=True)
class ProviderEvent:
    """A provider-side context change found in one call's report.

    `key` is unique within the call (the caller prefixes the call's identity).
    """

    kind: EventKind
    key: str
    trigger: str
    tokens_before: int | None
    tokens_after: int | None
    detail: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True, slots=True)
class ProviderUsage:
    """How one call is counted: `context` is the request the model answered (what the call's
    token buckets hold); `billed` are the passes to price (one for an ordinary call)."""

    context: NormalizedUsage
    billed: tuple[NormalizedUsage, ...]
    events: tuple[ProviderEvent, ...]


def read_provider_usage(
    usage: Mapping[str, Any],
    normalized: NormalizedUsage,
    *,
    cache_ttl: CacheTTL = "5m",
    context_management: Mapping[str, Any] | None = None,
    output_items: Sequence[Mapping[str, Any]] | None = None,
) -> ProviderUsage:
    """Split a call's report into its context, its billed passes and its provider events.

    `normalized` is `normalize_usage(usage)`. Without iterations the call is billed as
    reported and its context is `normalized`. Raises FieldError naming the field
    (`usage.iterations.1.input_tokens`, `context_management.applied_edits.0`, …) for anything
    it cannot count.
    """
    raw_iterations = usage.get("iterations")
    if context_management is None and output_items is None and raw_iterations is None:
        # The usual call: billed as reported, no event (the path below finds none, in three
        # calls and two `context_tokens`), so it is skipped for the usual call.
        return ProviderUsage(normalized, (normalized,), ())
    context = normalized
    billed: tuple[NormalizedUsage, ...] = (normalized,)
    events: list[ProviderEvent] = []
    if raw_iterations is not None and normalized.provider == "anthropic":
        if not isinstance(raw_iterations, list):
            raise FieldError("usage.iterations", "must be an array")
        passes = [_iteration(item, index, cache_ttl) for index, item in enumerate(raw_iterations)]
        if passes:
            billed = tuple(usage for _, usage in passes)
            last = billed[-1]
            # the last pass's counts, every bucket, under the call's flags
            context = replace(last, flags=(*normalized.flags, FLAG_BILLED_ITERATIONS))
            for index, (kind, usage_of) in enumerate(passes):
                if kind != "compaction":
                    continue
                after = billed[index + 1].context_tokens if index + 1 < len(billed) else None
                events.append(
                    ProviderEvent(
                        kind="compaction",
                        key=f"iteration:{index}",
                        trigger="compaction_iteration",
                        tokens_before=usage_of.context_tokens,
                        tokens_after=after,
                        detail={
                            "iteration": index,
                            "summary_output_tokens": usage_of.output,
                        },
                        summary=f"server-side compaction: a {usage_of.output:,}-token summary",
                    )
                )
    events.extend(_applied_edits(context_management, context.context_tokens))
    events.extend(_openai_compactions(output_items, context.context_tokens))
    return ProviderUsage(context, billed, tuple(events))


def _iteration(item: object, index: int, cache_ttl: CacheTTL) -> tuple[str, NormalizedUsage]:
    where = f"usage.iterations.{index}"
    if not isinstance(item, Mapping):
        raise FieldError(where, "must be an object")
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise FieldError(f"{where}.type", "must be a string")
    counts = {key: value for key, value in item.items() if key != "type"}
    try:
        return kind, normalize_usage(counts, provider="anthropic", cache_ttl=cache_ttl)
    except FieldError as exc:
        raise FieldError(f"{where}.{exc.field.removeprefix('usage.')}", exc.message) from None


def _applied_edits(
    context_management: Mapping[str, Any] | None, context_tokens: int
) -> list[ProviderEvent]:
    if context_management is None:
        return []
    edits = context_management.get("applied_edits") or []
    if not isinstance(edits, list):
        raise FieldError("context_management.applied_edits", "must be an array")
    events = []
    for index, edit in enumerate(edits):
        where = f"context_management.applied_edits.{index}"
        if not isinstance(edit, Mapping):
            raise FieldError(where, "must be an object")
        for name in _EDIT_COUNTS:
            value = edit.get(name)
            if value is not None and (type(value) is not int or value < 0):
                raise FieldError(f"{where}.{name}", "must be a non-negative integer")
        cleared = edit.get("cleared_input_tokens")
        events.append(
            ProviderEvent(
                kind="context_edit",
                key=f"edit:{index}",
                trigger=str(edit.get("type") or "context_edit")[:40],
                tokens_before=context_tokens + cleared if isinstance(cleared, int) else None,
                tokens_after=context_tokens if isinstance(cleared, int) else None,
                detail=dict(edit),
                summary=_edit_summary(edit),
            )
        )
    return events


def _edit_summary(edit: Mapping[str, Any]) -> str:
    said = [
        f"{edit[name]:,} {label}"
        for name, label in (
            ("cleared_tool_uses", "tool uses"),
            ("cleared_thinking_turns", "thinking turns"),
            ("cleared_input_tokens", "input tokens"),
        )
        if isinstance(edit.get(name), int)
    ]
    return "cleared " + ", ".join(said) if said else ""


def _openai_compactions(
    output_items: Sequence[Mapping[str, Any]] | None, context_tokens: int
) -> list[ProviderEvent]:
    events = []
    for index, item in enumerate(output_items or ()):
        if not isinstance(item, Mapping):
            raise FieldError(f"output_items.{index}", "must be an object")
        if item.get("type") != "compaction":
            continue
        item_id = item.get("id")
        events.append(
            ProviderEvent(
                kind="compaction",
                key=(
                    f"item:{item_id}"
                    if isinstance(item_id, str) and 0 < len(item_id) <= 80
                    else f"item:{index}"
                ),
                trigger="compaction_item",
                tokens_before=context_tokens,
                tokens_after=None,
                # The encrypted content is opaque and large; its size says what was kept.
                detail={
                    "item_id": item_id,
                    "encrypted_chars": len(str(item.get("encrypted_content") or "")),
                },
            )
        )
    return events
