"""Request and response schemas of the telemetry API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    field_validator,
)

from telemetry.money import Money
from telemetry.session_meta import metadata_problem
from telemetry.usage import MAX_STORED_COUNT


class PolicyOut(Schema):
    profile: str
    cache_ttl: Literal["5m", "1h"]
    prune_threshold: float
    summarize_threshold: float
    relief_hysteresis: float
    keep_rounds: int
    keep_rounds_verbatim: int
    stub_head_chars: int
    stub_tail_chars: int
    max_result_chars: int
    prune_min_free_tokens: int
    prune_exclude_tools: list[str]
    summary_max_tokens: int
    reserved_output_tokens: int
    round_soft_limit: int
    nudge_text: str
    round_hard_cap: int
    archive_retention_days: int
    call_retention_days: int
    log_retention_days: int


class ErrorOut(Schema):
    detail: str
    field: str | None = None


MAX_COUNT = 10**12  # far above any real request; stops integer overflow reaching the database
# PostgreSQL integer columns (turn, call, window, surface version, a call's counts)
MAX_SMALL = MAX_STORED_COUNT
MAX_BATCH = 1000
MAX_ID = 200  # a session id, model or request id
MAX_NAME = 64  # a provider or agent name


def no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _no_nul_anywhere(value: object) -> None:
    """PostgreSQL's jsonb cannot store \\u0000; refuse it anywhere in a JSON value.

    The usual value is passed by `nul_free` without a path per value (called per record of a
    1,000-record batch, make bench P1); the others are walked by `_refuse_nul` to name where.
    """
    if not nul_free(value):
        _refuse_nul(value)


def _refuse_nul(value: object, path: str = "") -> None:
    """Raise ValueError naming the first NUL in `value`; the oracle of `nul_free`."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{path or 'value'} must not contain NUL characters")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_nul(key, path)
            _refuse_nul(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_nul(item, f"{path}.{index}" if path else str(index))


def nul_free(value: object) -> bool:
    """True when `value` surely holds no NUL; False when it may (then `_refuse_nul` walks
    it again to name where)."""
    if type(value) is str:
        return "\x00" not in value
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str or "\x00" in key:
                return False
            if type(item) is str:
                if "\x00" in item:
                    return False
            elif not (type(item) is int or item is None or nul_free(item)):
                return False
        return True
    if type(value) is list:
        return all(nul_free(item) for item in value)
    return type(value) in (int, float, bool) or value is None


MAX_PREFIX_SEGMENTS = 20_000
MAX_SEGMENT_TEXT = 20_000


class PrefixSegmentIn(BaseModel):
    """One segment of a request's prefix, in order: `tools`, `system`, then one per message.

    `hash` is any content hash the agent computes (compared for equality only); `tokens` an
    estimate; `text` optionally the segment's readable content (the system block, say), so the
    console can show what changed between two calls.
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["tools", "system", "message"]
    hash: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    tokens: Annotated[StrictInt, Field(ge=0, le=MAX_COUNT)]
    text: Annotated[str, StringConstraints(max_length=MAX_SEGMENT_TEXT)] | None = None

    @field_validator("hash", "text")
    @classmethod
    def _without_nul(cls, value: str | None) -> str | None:
        return None if value is None else no_nul(value)


def prefix_order_error(segments: list[PrefixSegmentIn]) -> str | None:
    """None when `segments` run tools?, system?, then messages; else what is out of order."""
    rank = {"tools": 0, "system": 1, "message": 2}
    seen = -1
    for index, segment in enumerate(segments):
        position = rank[segment.kind]
        if position < seen or (position == seen and position < 2):
            return f"segment {index} ({segment.kind}) is out of order: tools, system, then messages"
        seen = position
    return None


class RecordIn(BaseModel):
    """One LLM call as an agent reports it. `usage` is the provider's usage object, verbatim."""

    model_config = ConfigDict(extra="forbid", strict=False)

    session_id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID)]
    turn: Annotated[StrictInt, Field(ge=0, le=MAX_SMALL)]
    call: Annotated[StrictInt, Field(ge=0, le=MAX_SMALL)] = 0
    model: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID)]
    usage: Annotated[
        dict[str, Any],
        # the token counts each provider shape requires (telemetry.usage), for the OpenAPI schema
        Field(
            json_schema_extra={
                "anyOf": [
                    {"required": ["input_tokens", "output_tokens"]},
                    {"required": ["prompt_tokens", "completion_tokens"]},
                    {"required": ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"]},
                ]
            }
        ),
    ]
    provider: Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME)] | None = None
    # The agent that made the call ("claude-code", ...), when it is known: cache writes its
    # record leaves without a tier are billed at the tier that agent writes with
    # (`telemetry.usage.untiered_write_tier`). Who reported a call is not part of it: a replay
    # with or without `agent` is the same call (`telemetry.idempotency.payload_hash`).
    agent: Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME)] | None = None
    request_id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID)] | None = None
    request_chars: Annotated[StrictInt, Field(ge=0, le=MAX_SMALL)] | None = None
    appended_chars: Annotated[StrictInt, Field(ge=0, le=MAX_SMALL)] | None = None
    window_tokens: Annotated[StrictInt, Field(ge=1, le=MAX_SMALL)] | None = None
    surface_version: Annotated[StrictInt, Field(ge=0, le=MAX_SMALL)] | None = None
    at: AwareDatetime | None = None
    # Provider-side context changes, verbatim: Anthropic's response `context_management`
    # (`applied_edits`) and OpenAI Responses output items (only `compaction` items are read).
    context_management: dict[str, Any] | None = None
    output_items: Annotated[list[dict[str, Any]], Field(max_length=1_000)] | None = None
    # What the provider said about the request's prompt cache, verbatim: Anthropic's response
    # `diagnostics` ({"cache_miss_reason": {...}}), OpenAI Responses' `prompt_cache_diagnostics`
    # (`telemetry.cache_diagnostics`).
    diagnostics: dict[str, Any] | None = None
    prompt_cache_diagnostics: dict[str, Any] | None = None
    # D1/D2: the request's prefix fingerprints (optional; a `surface_version` stands for ours).
    prefix: Annotated[list[PrefixSegmentIn], Field(max_length=MAX_PREFIX_SEGMENTS)] | None = None
    # What the agent knows about its session (`telemetry.session_meta`): `title`, `user`,
    # `repository`, `cwd`, `branch`, `agent`, `agent_version`... up to 50 string or number
    # values. Merged into the session's metadata; never part of the call's identity.
    metadata: dict[str, Any] | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix_in_order(cls, value: list[PrefixSegmentIn] | None) -> list[PrefixSegmentIn] | None:
        problem = None if value is None else prefix_order_error(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    # Each validator below is a Python call per record of a 1,000-record batch; they are few
    # and test the usual value in C before anything else, so a batch's validation stays cheap
    # (docs/performance.md; tests/db/test_record_validators.py).

    @field_validator("model", "provider", "agent", "request_id")
    @classmethod
    def _strings_without_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            no_nul(value)  # raises; the test above is `no_nul`'s, without its call
        return value

    @field_validator("session_id")
    @classmethod
    def _session_id_routable(cls, value: str) -> str:
        # NUL first, as for every string; then '/', since every route reads a session back by
        # its id as one path segment. One validator: two were a call more per record.
        if "\x00" in value:
            no_nul(value)  # raises
        if "/" in value:
            raise ValueError("must not contain '/' (session ids are one URL path segment)")
        return value

    @field_validator("at")
    @classmethod
    def _at_in_utc_range(cls, value: datetime | None) -> datetime | None:
        # A UTC offset is under a day, so only the first and the last year can leave the range
        # (a conversion per record is saved; the offset was read when `at` was validated).
        if value is not None and not 1 < value.year < 9999:
            try:
                value.astimezone(UTC)
            except OverflowError:
                raise ValueError("is out of range once converted to UTC") from None
        return value

    @field_validator("usage")
    @classmethod
    def _usage_without_nul(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not nul_free(value):  # `_no_nul_anywhere`, without its call
            _refuse_nul(value)
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_shape(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            _no_nul_anywhere(value)
            problem = metadata_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator(
        "context_management", "output_items", "diagnostics", "prompt_cache_diagnostics"
    )
    @classmethod
    def _provider_context_without_nul(cls, value: Any) -> Any:
        if value is not None:
            _no_nul_anywhere(value)
        return value


# RecordIn's fields that have a default, with it (what `exclude_defaults` leaves out, and what a
# record made by `trusted_record` holds where its values say nothing).
RECORD_DEFAULTS: dict[str, Any] = {
    name: field.get_default(call_default_factory=True)
    for name, field in RecordIn.model_fields.items()
    if not field.is_required()
}


def trusted_record(values: dict[str, Any], at: datetime | None = None) -> RecordIn:
    """A RecordIn holding `values` (and `at`, unless None) as they are, not validated: for values
    already known to keep its rules (`telemetry.validation.typed` decides which). What
    `RecordIn.model_construct` makes, without its loop over every field (it cost more than
    validating); `at` is set without a copy of `values` to hold it."""
    fields = {**RECORD_DEFAULTS, **values}
    fields_set = set(values)
    if at is not None:
        fields["at"] = at
        fields_set.add("at")
    record = _new_object(RecordIn)
    object.__setattr__(record, "__dict__", fields)
    # BaseModel's slots set through their own descriptors: `object.__setattr__` looks each up
    _set_fields_set(record, fields_set)
    _set_extra(record, None)
    _set_private(record, None)
    return record


_new_object = object.__new__
_set_fields_set = vars(BaseModel)["__pydantic_fields_set__"].__set__
_set_extra = vars(BaseModel)["__pydantic_extra__"].__set__
_set_private = vars(BaseModel)["__pydantic_private__"].__set__


class BatchIn(BaseModel):
    """Up to 1,000 records; each is answered on its own."""

    records: list[RecordIn]


# One submitted record's outcome: the closed set ingest decides (`telemetry.validation`) and
# the API answers.
ItemStatus = Literal["created", "duplicate", "conflict", "invalid"]


class ItemOut(Schema):
    index: int
    status: ItemStatus
    session_id: str | None = None
    turn: int | None = None
    call: int | None = None
    field: str | None = None
    detail: str | None = None
    nudge: str | None = None
    stop: bool = False


class SessionFiguresOut(Schema):
    session_id: str
    profile: str
    model: str
    turns: int
    calls: int
    last_turn: int | None
    last_turn_rounds: int
    current_context_tokens: int | None
    peak_context_tokens: int | None
    projected_next_request_tokens: int | None
    window_tokens: int | None
    # Where the window came from: record, overflow, profile_model, profile_default, catalogue
    # (None: unknown); `window_source_label` says it in words.
    window_source: str | None = None
    window_source_label: str | None = None
    reserved_output_tokens: int
    pressure: float | None
    pressure_band: str
    cache_hit_ratio: float | None
    last_turn_cache_hit_ratio: float | None
    cost_usd: Money | None
    no_cache_cost_usd: Money | None
    cache_savings_usd: Money | None
    # calls `cost_usd` leaves out: their model has no catalogue price
    unpriced_calls: int
    surface_version: int
    last_seen_at: str | None
    round_signal: Literal["none", "nudge", "stop"]
    nudge: str | None = None


class IngestOut(Schema):
    created: int
    duplicates: int
    conflicts: int
    invalid: int
    items: list[ItemOut]
    sessions: list[SessionFiguresOut]


class TurnOut(Schema):
    turn: int
    calls: int
    context_tokens: int
    cache_hit_ratio: float | None
    cost_usd: Money | None
    # calls of the turn `cost_usd` leaves out: their model has no catalogue price
    unpriced_calls: int
    uncached_input: int
    cache_read: int
    cache_write_5m: int
    cache_write_1h: int
    output: int
    first_at: str
    last_at: str
    model: str
    surface_version: int | None


class SessionReadOut(SessionFiguresOut):
    """A session as the read API gives it: its figures, with its name, metadata and tags."""

    title: str = Field(
        description="what the agent or its user named the session, else its first prompt, "
        "trimmed (empty while no door said)"
    )
    metadata: dict[str, str] = Field(
        description="what the doors reported: user, repository, cwd, branch, commit, agent, "
        "agent_version, entrypoint, originator and keys of the caller's own"
    )
    tags: list[str] = Field(description="the operators' tags, sorted")


class SessionDetailOut(SessionReadOut):
    series_complete: bool = Field(
        description="true when `turns_series` holds every turn; false when it was downsampled "
        "to `series_limit` points (read every turn from `GET …/turns`)"
    )
    turns_series: list[TurnOut] = Field(
        description="the per-turn series, in turn order: every turn when they fit in "
        "`series_limit`, else downsampled as the charts are (peaks, first and last turn, the "
        "turns either side of each compaction kept)"
    )
