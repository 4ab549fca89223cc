"""Ingest step 1: validate and normalise each submitted record on its own.

One bad item never drops the others: each gets its own outcome naming the field that broke.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pydantic import ValidationError

from telemetry import safejson
from telemetry.cache_diagnostics import ProviderDiagnosis, read_record
from telemetry.errors import FieldError
from telemetry.idempotency import payload_hash
from telemetry.policy_rules import PolicyValues
from telemetry.provider_context import ProviderUsage, read_provider_usage
from telemetry.schemas import (
    MAX_ID,
    MAX_NAME,
    MAX_SMALL,
    ItemStatus,
    RecordIn,
    nul_free,
    trusted_record,
)
from telemetry.usage import (
    MAX_STORED_COUNT,
    NormalizedUsage,
    normalize_usage,
    oversized_count,
    untiered_write_tier,
)
from telemetry.utc_text import is_canonical_utc

Status = ItemStatus


@dataclass
class ItemResult:
    """The outcome of one submitted record, in submission order (`index`)."""

    index: int
    status: Status
    session_id: str | None = None
    turn: int | None = None
    call: int | None = None
    field: str | None = None
    detail: str | None = None
    nudge: str | None = None
    stop: bool = False


@dataclass
class ValidRecord:
    """A record that passed validation: the record, its normalised usage, its payload hash."""

    index: int
    record: RecordIn
    usage: NormalizedUsage
    payload_hash: bytes  # stored form (`telemetry.idempotency.stored_digest`)
    # The passes to bill and the provider-side compactions/edits (`telemetry.provider_context`).
    provided: ProviderUsage
    # The submitted object keeps `safejson.is_plain` (so does every value in it: `usage`...).
    plain: bool = False
    # What the provider said about the request's cache (`telemetry.cache_diagnostics`).
    diagnosis: ProviderDiagnosis | None = None


@dataclass(slots=True)
class Typed:
    """A record an on-ramp built from typed values (OTLP's call drafts, `telemetry.otlp.store`)
    that keep `RecordIn`'s rules (`typed` checked them): `validate_items` takes it as it is,
    without the round trip through a JSON object and its validation, and checks the rest like
    any record's (`at`'s bound, the usage, the window, the payload hash)."""

    record: RecordIn
    # the JSON object the record stands for, without `at` (`payload_hash`: `at` is hashed
    # from the record), keeping `safejson.is_plain`
    values: dict[str, Any]


# The fields a typed record may set, and what `typed` checks of each: text of 1 to n characters
# without NUL; integers from n to MAX_SMALL (never a bool); the usage object.
_TEXTS: Final = {
    "session_id": MAX_ID,
    "model": MAX_ID,
    "request_id": MAX_ID,
    "provider": MAX_NAME,
    "agent": MAX_NAME,
}
_COUNTS: Final = {
    "turn": 0,
    "call": 0,
    "window_tokens": 1,
    "request_chars": 0,
    "appended_chars": 0,
    "surface_version": 0,
}
_REQUIRED: Final = frozenset({"session_id", "turn", "model", "usage"})
_TYPED: Final = frozenset({*_TEXTS, *_COUNTS, "usage"})
# A JSON object's fields `usual_record` takes: a typed record's, and `at` (`_usual_at`).
_USUAL: Final = _TYPED | {"at"}


def typed(values: dict[str, Any], at: datetime | None) -> Typed | None:
    """`values` and `at` as a record `validate_items` takes without validating its fields, when
    each keeps `RecordIn`'s rule (and the JSON rule, `safejson`) by the checks here; else None,
    and the caller sends `values` with `at` in ISO form as a JSON object.

    The checks (`_keeps_fields`) restate the rules of the fields in `_TYPED` for values of
    their own Python types only (text, integers, a usage object of plain JSON values, a UTC
    time); anything else is left to the validation. tests/db/test_typed_records.py holds
    `validate_items`' answer for a typed record equal to its answer for the JSON object, over
    drawn values and the boundaries of every check."""
    if not _keeps_fields(values, _TYPED):
        return None
    if at is not None and (
        type(at) is not datetime or at.tzinfo is not UTC or not 1 < at.year < 9999
    ):
        return None
    return Typed(trusted_record(values, at), values)


def usual_record(raw: dict[str, Any]) -> RecordIn | None:
    """The record of a JSON object whose fields `typed` would take, with `at` absent, null or
    text `RecordIn` reads as a UTC time within its range (`_usual_at`), made without the
    validation (`schemas.trusted_record`): the same record, as `validate_items` answers for
    it, in less CPU than the validation and its walks (make bench P1). None for any other
    object, which the validation judges. The object keeps `safejson.is_plain` when taken.
    tests/db/test_typed_records.py holds the two paths' answers equal."""
    at = raw.get("at")
    if at is not None:
        at = _usual_at(at)
        if at is None:
            return None
    if not _keeps_fields(raw, _USUAL):
        return None
    return trusted_record(raw, at)


def _usual_at(sent: object) -> datetime | None:
    """`sent` as the aware datetime `RecordIn.at` validates it to, when it is text in the
    spelling `isoformat()` gives a UTC time (`utc_text.is_canonical_utc`), of a real date, in a
    year where no conversion can leave the range (`RecordIn._at_in_utc_range`); else None."""
    if type(sent) is not str or not is_canonical_utc(sent):
        return None
    try:
        at = datetime.fromisoformat(sent)
    except ValueError:  # a day the calendar does not have (the validation names it)
        return None
    return at if 1 < at.year < 9999 else None


def _keeps_fields(values: dict[str, Any], allowed: frozenset[str]) -> bool:
    """Whether each field of `values` keeps `RecordIn`'s rule and the JSON rule by the checks
    `typed` names, its names all in `allowed` and the required ones there. An `at` (when
    `allowed` has it) is not checked here: `usual_record` reads it."""
    keys = values.keys()
    if not (keys >= _REQUIRED and keys <= allowed):
        return False
    for name, value in values.items():
        kind = type(value)
        if kind is str:
            limit = _TEXTS.get(name)
            if limit is None:
                if name == "at":
                    continue
                return False
            if not 0 < len(value) <= limit or "\x00" in value:
                return False
            if not value.isascii() and safejson.has_lone_surrogate(value):  # JSON's rule
                return False
        elif kind is int:
            low = _COUNTS.get(name)
            if low is None or not low <= value <= MAX_SMALL:
                return False
        elif name != "usage" and (name != "at" or value is not None):
            return False
    usage = values["usage"]
    if "/" in values["session_id"] or type(usage) is not dict:
        return False
    # The fields' names are text, their texts checked above and their integers plain: the values
    # keep the JSON rule (`safejson.is_plain`) when the usage does. A flat usage of integers
    # and text (what a span's is) is checked here in one pass; any other by the walks.
    for key, item in usage.items():
        kind = type(item)
        if kind is str:
            if "\x00" in item or not (item.isascii() or not safejson.has_lone_surrogate(item)):
                return False
        elif kind is not int:
            break
        if type(key) is not str or "\x00" in key:
            return False
        if not key.isascii() and safejson.has_lone_surrogate(key):
            return False
    else:
        return True  # checked
    return nul_free(usage) and safejson.is_plain(values)


def validation_field(error: ValidationError, prefix: str) -> tuple[str, str]:
    """The dotted field name and message of a pydantic error's first problem."""
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        message = "is not a known field"
    name = f"{prefix}{loc}" if loc else prefix.rstrip(".") or "body"
    return name, message


def validate_items(
    raw_items: Sequence[object],
    *,
    policy: PolicyValues,
    batch: bool,
    latest_at: datetime | None = None,
) -> tuple[list[ItemResult | None], list[ValidRecord]]:
    """Validate and normalise each item on its own: one bad item never drops the others.

    An item is a JSON object, or a `Typed` record whose fields are known valid (only the
    checks after the fields' own are made for it). An `at` after `latest_at` (the clock plus
    the skew allowed; None: no bound) is refused.

    Returns one slot per item (an `invalid` outcome, or None for a valid one) and the valid ones.
    """
    outcomes: list[ItemResult | None] = []
    valid: list[ValidRecord] = []
    cache_ttl = policy.cache_ttl
    reserved = policy.reserved_output_tokens
    for index, raw in enumerate(raw_items):
        record: RecordIn
        hashed: dict[str, Any] | None
        canonical_at = False  # the object's `at` text is known to be canonical (`payload_hash`)
        if type(raw) is Typed:
            record, plain, hashed = raw.record, True, raw.values
        elif not isinstance(raw, dict):
            name = _prefix(index, batch).rstrip(".") or "body"
            outcomes.append(
                ItemResult(index, "invalid", field=name, detail=f"{name}: must be a JSON object")
            )
            continue
        elif (usual := usual_record(raw)) is not None:
            record, plain, hashed, canonical_at = usual, True, raw, True
        else:
            plain = safejson.is_plain(raw)
            unsafe = (
                None if plain else safejson.problem(raw, base=_prefix(index, batch).rstrip("."))
            )
            if unsafe is not None:  # a lone surrogate, NaN, too deep: refused, the batch goes on
                outcomes.append(
                    ItemResult(index, "invalid", field=unsafe[0], detail=": ".join(unsafe))
                )
                continue
            try:
                # `RecordIn.model_validate(raw)` without its Python frame and the six keyword
                # arguments it passes on, all their defaults here: a frame less for every
                # record of a batch
                record = RecordIn.__pydantic_validator__.validate_python(raw)
            except ValidationError as exc:
                name, message = validation_field(exc, _prefix(index, batch))
                outcomes.append(
                    ItemResult(index, "invalid", field=name, detail=f"{name}: {message}")
                )
                continue
            hashed = raw if plain else None
        if latest_at is not None and record.at is not None and record.at > latest_at:
            outcomes.append(
                _invalid(
                    index,
                    record,
                    f"{_prefix(index, batch)}at",
                    f"is after {latest_at.isoformat(timespec='seconds')}, the console's clock"
                    " plus the skew it allows (TELEMETRY_CLOCK_SKEW_SECONDS)",
                )
            )
            continue
        usage = record.usage
        # writes the record leaves without a tier: the agent's tier, else the profile's
        tier = cache_ttl if record.agent is None else untiered_write_tier(record.agent, cache_ttl)
        try:
            normalized = normalize_usage(
                usage, provider=record.provider, model=record.model, cache_ttl=tier
            )
            provided = read_provider_usage(
                usage,
                normalized,
                cache_ttl=tier,
                context_management=record.context_management,
                output_items=record.output_items,
            )
        except FieldError as exc:
            name = exc.field if exc.field.startswith(_OWN_FIELDS) else f"usage.{exc.field}"
            if exc.field == "provider":
                name = "provider"
            outcomes.append(_invalid(index, record, f"{_prefix(index, batch)}{name}", exc.message))
            continue
        oversized = oversized_count(provided.context)
        if oversized is not None:
            name, value = oversized
            outcomes.append(
                _invalid(
                    index,
                    record,
                    f"{_prefix(index, batch)}usage",
                    f"{name} must be at most {MAX_STORED_COUNT} tokens, got {value}",
                )
            )
            continue
        if record.window_tokens is not None and record.window_tokens <= reserved:
            outcomes.append(
                _invalid(
                    index,
                    record,
                    f"{_prefix(index, batch)}window_tokens",
                    f"must exceed the profile's reserved_output_tokens ({reserved})",
                )
            )
            continue
        diagnosis = None
        if (
            record.diagnostics is not None
            or record.prompt_cache_diagnostics is not None
            or not _DIAGNOSTICS_KEYS.isdisjoint(usage)
        ):
            try:
                diagnosis = read_record(
                    diagnostics=record.diagnostics,
                    prompt_cache_diagnostics=record.prompt_cache_diagnostics,
                    usage=usage,
                )
            except FieldError as exc:
                name = f"{_prefix(index, batch)}{exc.field}"
                outcomes.append(_invalid(index, record, name, exc.message))
                continue
        outcomes.append(None)
        digest = payload_hash(record, hashed, canonical_at)
        valid.append(
            ValidRecord(index, record, provided.context, digest, provided, plain, diagnosis)
        )
    return outcomes, valid


def _prefix(index: int, batch: bool) -> str:
    """What the names of an item's fields start with: made only for an invalid item (made for
    every record, it was work on every valid batch for nothing)."""
    return f"records.{index}." if batch else ""


_OWN_FIELDS = ("usage", "context_management", "output_items")

# The keys of a usage object that may carry the provider's cache diagnostics (read_record).
_DIAGNOSTICS_KEYS = frozenset({"diagnostics", "cache_miss_reason", "prompt_cache_diagnostics"})


def _invalid(index: int, record: RecordIn, name: str, message: str) -> ItemResult:
    return ItemResult(
        index,
        "invalid",
        session_id=record.session_id,
        turn=record.turn,
        call=record.call,
        field=name,
        detail=f"{name}: {message}",
    )
