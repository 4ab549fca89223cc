"""Ingest step 3: price each new call and build its row.

The catalogue is read at most once per submission, and a model's price is looked up once
(`telemetry.catalogue.OnceCatalogue`, shared by a key's submissions for a second).
"""

from __future__ import annotations

from collections import namedtuple
from datetime import datetime
from decimal import Decimal
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import msgspec
from django.db.models.base import ModelState

from telemetry.cache_diagnostics import ProviderDiagnosis
from telemetry.ingest.values import json_text
from telemetry.models import AgentSession, LLMCall, stored_flags
from telemetry.pricing import BILLED_FIGURES, IntegerPricer
from telemetry.schemas import RecordIn
from telemetry.usage import BUCKETS
from telemetry.usage_forms import stored_usage
from telemetry.validation import ValidRecord


def stored_prefix(record: RecordIn) -> list[dict[str, Any]] | None:
    """The record's prefix as stored: segments named `tools`, `system`, `message k` (D1/D2)."""
    if record.prefix is None:
        return None
    out: list[dict[str, Any]] = []
    messages = 0
    for segment in record.prefix:
        name: str = segment.kind
        if name == "message":
            name = f"message {messages}"
            messages += 1
        item: dict[str, Any] = {"name": name, "hash": segment.hash, "tokens": segment.tokens}
        if segment.text is not None:
            item["text"] = segment.text
        out.append(item)
    return out


def call_row(
    session: AgentSession, v: ValidRecord, pricer: IntegerPricer | None, now: datetime
) -> LLMCall:
    """The unsaved row of a new call: `call_values`' row as a model instance, its JSON columns
    as the values JSONField encodes (`raw_usage`, `flags`, `prefix`: the values `call_values`
    writes as text)."""
    values = call_values(session.pk, v, pricer, now)._asdict()
    values.update(
        raw_usage=stored_usage(v.usage.provider, v.record.usage, *_BUCKET_COUNTS(v.usage)),
        flags=list(v.usage.flags),
        prefix=stored_prefix(v.record),
        provider_diagnostics=None if v.diagnosis is None else v.diagnosis.stored(),
    )
    return _unsaved_call(session, **values)


_CALL_FIELDS = LLMCall._meta.concrete_fields


def _unsaved_call(session: AgentSession, **values: Any) -> LLMCall:
    """`LLMCall(session=session, **values)` without `Model.__init__`'s per-field work (a fifth
    of a 1,000-record batch's CPU, make bench P1): the same unsaved instance, every concrete
    field set (a field `values` leaves out gets its default, as `__init__` would give it), the
    session cached as the relation `__init__` would cache."""
    call = LLMCall.__new__(LLMCall)
    state = ModelState()
    state.fields_cache["session"] = session
    attributes: dict[str, Any] = {"_state": state, "session_id": session.pk}
    # the fields `values` leaves out, found by one set difference in C (was a test per field)
    for name in _CALL_ATTNAMES.difference(values):
        attributes[name] = _CALL_BY_ATTNAME[name].get_default()
    attributes.update(values)
    call.__dict__.update(attributes)
    return call


_CALL_BY_ATTNAME = {f.attname: f for f in _CALL_FIELDS if f.attname != "session_id"}
_CALL_ATTNAMES = frozenset(_CALL_BY_ATTNAME)


# A new call's row for COPY: every concrete field of a call but its primary key, in the model's
# order, which is the order COPY names them in (`telemetry.ingest.new_rows.copy_rows`). A tuple that
# also reads by field name, so `telemetry.rollups.sum_by_hour` takes it as it takes an `LLMCall`.
CALL_COLUMNS: tuple[str, ...] = (
    "session_id",
    "turn",
    "call",
    "request_id",
    "model",
    "provider",
    *BUCKETS,
    "reasoning_output",
    "reported_cache",
    "context_tokens",
    "raw_usage",
    "flags",
    "request_chars",
    "appended_chars",
    "window_tokens",
    "surface_version",
    "prefix",
    "provider_miss_type",
    "provider_missed_tokens",
    "provider_diagnostics",
    "at",
    *BILLED_FIGURES,  # in `IntegerPricer.values`' order
    "payload_hash",
    "received_at",
)

if TYPE_CHECKING:

    class CallRow(tuple[Any, ...]):
        """A namedtuple of `CALL_COLUMNS` (made from the list at run time, so a column is named
        once): each value read by its name."""

        _fields: tuple[str, ...]

        def __new__(cls, *values: Any, **by_name: Any) -> CallRow: ...
        def __getattr__(self, name: str) -> Any: ...
        def _asdict(self) -> dict[str, Any]: ...

else:
    CallRow = namedtuple("CallRow", CALL_COLUMNS)


def call_values(
    session_pk: int, v: ValidRecord, pricer: IntegerPricer | None, now: datetime
) -> CallRow:
    """The row of a new call as a tuple of `CALL_COLUMNS` for COPY (JSON fields as JSON text,
    received at `now`), the one definition of a new call's row (`call_row` is it as an
    instance).

    It runs once per stored call, so: the costs come as one flat tuple in the row's order
    (`IntegerPricer.values`, no `CostBreakdown` to read back), the usual empty flags, absent
    prefix and absent diagnostics as SQL NULL (what the ORM stores for them: `FlagList`, a
    JSONField's None) without `json_text`, and the tuple is made without the
    namedtuple's own `__new__` (a Python frame of 32 arguments). tests/db/test_call_values.py
    holds each column, by name, to what the record says it is."""
    usage, record, diagnosis = v.usage, v.record, v.diagnosis
    costs: tuple[Decimal | bool | None, ...] = (
        _UNPRICED if pricer is None else pricer.values(v.provided.billed)
    )
    counts = _BUCKET_COUNTS(usage)
    raw = record.usage
    if stored_usage(usage.provider, raw, *counts) is None:
        raw_text = None  # the usual usage: its buckets say all of it (`telemetry.usage_forms`)
    else:
        raw_text = _plain_json(raw).decode() if v.plain else json_text(raw)
    return tuple.__new__(
        CallRow,
        (
            session_pk,
            record.turn,
            record.call,
            record.request_id,
            record.model,
            usage.provider,
            *counts,
            usage.reasoning_output,
            usage.reported_cache,
            usage.context_tokens,
            raw_text,
            None if (flags := stored_flags(usage.flags)) is None else json_text(flags),
            record.request_chars,
            record.appended_chars,
            record.window_tokens,
            record.surface_version,
            None if record.prefix is None else json_text(stored_prefix(record)),
            *(_UNDIAGNOSED if diagnosis is None else _diagnosed(diagnosis)),
            record.at or now,
            *costs,
            v.payload_hash,
            now,
        ),
    )


_BUCKET_COUNTS = attrgetter(*BUCKETS)

# A call without the provider's cache diagnostics (the usual one): its three columns.
_UNDIAGNOSED = (None, None, None)


def _diagnosed(diagnosis: ProviderDiagnosis) -> tuple[str, int | None, str]:
    return (diagnosis.type, diagnosis.missed_tokens, json_text(diagnosis.stored()))


# An unpriced call's figures in `IntegerPricer.values`' order: unknown, never 0, not long-context.
_UNPRICED = tuple(False if name == "long_context" else None for name in BILLED_FIGURES)

# The raw usage of a plain record (`safejson.is_plain`: JSON's own types, no float, no lone
# surrogate) as msgspec's compact JSON: the text differs from `json_text`'s (no spaces, UTF-8
# where `json.dumps` escapes) but jsonb parses both to the same value, which is what is stored
# (numbers are integers, whose digits both write alike), at a fraction of `json_text`'s cost.
# Floats go through `json_text`: their exponents are spelt differently, and a numeric keeps the
# scale it is written with. tests/db/test_call_values.py holds the stored rows equal.
_plain_json = msgspec.json.Encoder().encode
