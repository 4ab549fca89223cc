"""Request and response schemas of the compaction API (`compaction.api`, `log_api`, `imports.api`).

Two kinds of object, two rules:

- **Our envelopes** (`MessagesIn`, `CompactIn`, `OverflowIn`) refuse unknown fields
  (`extra="forbid"`): a misspelt `expected_surface_version` is a 422 naming it, never ignored.
- **Provider objects** (messages, content blocks, `system`, a surface's messages, an archive's
  log) are the agent's, with fields we do not know: they are typed `dict[str, Any]` / `Any`, so
  pydantic passes them through untouched (no field dropped, reordered or coerced) and only their
  documented shape (`ProviderMessage`: an object with an integer `seq`) is published. The log
  never stores the validated value anyway: `compaction.api` takes each message's original JSON
  text from the request body (`compaction.rawjson`), see `post_messages`.

Response schemas list their fields in the order the routes have always written them, so the
bodies are what they were, now documented; routes that stream stored bytes (surface, log page)
return them as they are and the schema documents their shape.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field, StrictInt, StrictStr, WithJsonSchema

from telemetry.money import Money
from telemetry.schemas import no_nul

MAX_SEQ = 2**31 - 1

ProviderMessage = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "the provider's message, verbatim, plus its integer `seq` in the log "
            "(any other field is kept byte for byte)",
            "required": ["seq"],
            "properties": {"seq": {"type": "integer", "minimum": 0, "maximum": MAX_SEQ}},
            "additionalProperties": True,
        }
    ),
]
"""One provider message as appended or served: an object kept verbatim."""

Verbatim = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "a provider message, as it was appended",
            "additionalProperties": True,
        }
    ),
]


class MessagesIn(Schema):
    """`POST /sessions/{id}/messages`: the envelope (our fields) around provider messages."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["anthropic", "openai"]
    system: Any = Field(
        None,
        description="Anthropic system prompt (string or text blocks); stored as seq 0, so the "
        "messages of that append start at seq 1",
    )
    messages: Annotated[list[ProviderMessage], Field(min_length=1)]


class CompactIn(Schema):
    """`POST /sessions/{id}/compact` (optional body): refuse (409) when the surface moved."""

    model_config = ConfigDict(extra="forbid")

    expected_surface_version: Annotated[StrictInt, Field(ge=0)] | None = None


class OverflowIn(Schema):
    """`POST /sessions/{id}/overflow` (optional body): which surface overflowed and how."""

    model_config = ConfigDict(extra="forbid")

    surface_version: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="the surface version of the request that overflowed (default: now)"
    )
    detail: Annotated[StrictStr, Field(max_length=10_000), AfterValidator(no_nul)] | None = Field(
        None,
        description="the provider's error text; a limit stated in it becomes the session's window",
    )


class MessagesOut(Schema):
    session_id: str
    appended: list[int]
    duplicates: list[int]
    surface_version: int
    surface_tokens_estimate: int
    log_messages: int


class SegmentPrintOut(Schema):
    name: str = Field(description="`system`, then `message k`")
    hash: str
    tokens: int
    text: str | None = Field(None, description="the segment's readable text, when it has one")


class SurfaceOut(Schema):
    """The model-visible messages (canonical JSON, byte-stable per version)."""

    format: Literal["anthropic", "openai"]
    surface_version: int
    log_seq: int = Field(
        description="the seq of the last log message this surface follows (also `X-Log-Seq`)"
    )
    log_hash: str = Field(
        description="the hash of the log up to `log_seq` (`context_core.log_position`; also "
        "`X-Log-Hash`): a client uses the surface only if it matches what it appended"
    )
    messages: list[Verbatim]
    system: Any = Field(None, description="Anthropic only, and only when there is one")


class PrefixedSurfaceOut(SurfaceOut):
    """`GET /surface`: the surface, with its fingerprints when asked (`prefix=true`)."""

    prefix: list[SegmentPrintOut] | None = Field(None, description="with `prefix=true` only")


class ArchiveOut(Schema):
    id: int
    namespace: str
    created_at: str
    log_messages: int
    surface_version: int
    chars: int


class ArchiveDocumentOut(Schema):
    id: int
    namespace: str
    session_id: str
    profile: str
    format: Literal["anthropic", "openai"]
    created_at: str
    log_messages: int
    surface_version: int
    log: list[Verbatim] = Field(description="the log as received, each message with its seq")
    surface: dict[str, Any] = Field(description="the surface as it was (messages, system)")


class SearchHitOut(Schema):
    archive_id: int
    session_id: str
    namespace: str
    seq: int
    role: str
    snippet: str = Field(description="safe HTML; hits are marked with <mark>")
    created_at: str
    rank: float
    archives: int = Field(
        description="how many of the session's archives hold this message: each archive holds "
        "the log up to its compaction, so a message is one hit, from the newest archive holding it"
    )


class RunOut(Schema):
    """One compaction run as the API reports it."""

    run_id: int
    mode: str = Field(description="manual, auto or overflow")
    status: str = Field(description="running, applied, noop, refused, superseded or failed")
    action: str
    reason: str
    tokens_before: int | None
    tokens_after: int | None
    estimate_tokens: int | None = Field(description="D6: the next request's estimated size")
    estimate_method: Literal["fit", "rule"] | None
    archived: bool
    archive_id: int | None
    archive_error: str | None
    surface_version: int | None


class ConflictOut(Schema):
    """A 409 that names why nothing was applied."""

    error: Literal["archive_failed", "compaction_busy", "overflow_unrecoverable"]
    detail: str


class CompactConflictOut(RunOut, ConflictOut):
    """409 of `POST /compact`: why (`error`, `detail` first), then the run that refused."""


class OverflowOut(RunOut):
    surface: Annotated[
        dict[str, Any] | None,
        # passed through as served (an absent `system` stays absent), documented as SurfaceOut
        WithJsonSchema(
            {
                "anyOf": [SurfaceOut.model_json_schema(), {"type": "null"}],
                "description": "the new surface, as `GET /surface` serves it",
            }
        ),
    ]


class FirstChangeOut(Schema):
    index: int
    segment: str
    seq: int | None
    role: str | None
    unchanged_tokens: int


class RatesOut(Schema):
    input: str
    read: str
    write: str


class PlanOut(Schema):
    session_id: str
    mode: Literal["manual", "auto"]
    action: str
    reason: str
    tokens_before: int
    tokens_after: int = Field(
        description="D6: the next request's estimated size after it, as the run records it"
    )
    estimate_method: Literal["fit", "rule"] | None = Field(
        None, description="D6: how tokens_after was estimated (None when nothing would change)"
    )
    freed_tokens: int
    first_change: FirstChangeOut | None
    rewrite_tokens: int
    rewrite_cost_usd: Money | None
    rewrite_premium_usd: Money | None
    saving_per_call_usd: Money | None
    break_even_calls: int | None
    remaining_calls: int
    worth_it: bool
    skipped: list[str]
    model: str
    priced: bool
    write_tier: Literal["5m", "1h", "none"]
    rates_per_mtok: RatesOut | None


class ChurnOut(Schema):
    pairs: int
    changed: int
    violates_d2: bool


class MissOut(Schema):
    turn: int
    call: int
    at: str
    model: str
    expected_tokens: int
    read_tokens: int
    missed_tokens: int
    premium_usd: Money | None
    cause: str = Field(
        description="THE cause: the provider's verdict when its diagnostics gave one, else ours"
    )
    evidence: str = Field(description="our reading in words (`detail`: the same as data)")
    detail: dict[str, Any]
    inferred_cause: str = Field(description="our own cause, whatever the provider said")
    provider_type: str | None = Field(
        description="the provider's word (Anthropic `cache_miss_reason.type`, OpenAI's miss "
        "`reason` or outcome); null: the call carried no cache diagnostics"
    )
    provider_missed_tokens: int | None = Field(
        description="the tokens the provider says fell after the divergence"
    )
    provider_cause: str | None = Field(
        description="our cause for the provider's word; null: no verdict (not compared, "
        "nothing found, or a word we do not know)"
    )
    provider_diagnostics: dict[str, Any] | None = Field(
        description='the provider\'s object verbatim, under its format: {"anthropic": {...}} '
        'or {"openai": {...}}'
    )
    agrees: bool | None = Field(
        description="whether our cause agrees with the provider's; null without its verdict"
    )
    readings: str | None = Field(
        description="both readings in words: `provider: messages_changed, 12,016 tokens; ours: "
        "prefix_break at message 41`"
    )


class AgreementOut(Schema):
    compared: int = Field(description="misses the provider gave a verdict on")
    agreed: int = Field(description="of those, misses whose cause we inferred alike")
    rate: float | None = Field(description="agreed / compared; null when none compared")


class CacheMissesOut(Schema):
    session_id: str
    calls: int
    premium_usd: Money
    premium_by_cause_usd: dict[str, Money]
    system_churn: ChurnOut
    agreement: AgreementOut
    misses: list[MissOut]


class LogPageOut(Schema):
    session_id: str
    format: Literal["anthropic", "openai"] | None
    log_messages: int
    next_after_seq: int | None = Field(description="the next page's `after_seq`; null at the end")
    messages: list[ProviderMessage] = Field(description="each byte for byte as appended")


class SkippedLineOut(Schema):
    line: int
    reason: str


class NoteOut(Schema):
    line: int
    text: str


class ImportOut(Schema):
    path: str
    format: str
    status: str = Field(description="imported, unchanged, rewritten, failed or empty")
    detail: str
    sessions: list[str]
    messages: int
    calls: int
    duplicate_calls: int
    compactions: int
    lines: int
    bytes: int
    skipped: list[SkippedLineOut]
    notes: list[NoteOut]
