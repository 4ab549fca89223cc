"""Ingest step 2: is a record new, a duplicate, or a conflict?

A call is keyed by (session, turn, call), or by `request_id` when the agent sends one. The same
payload again is a `duplicate` and changes nothing; different content under a taken key is a
`conflict`. Payloads are compared by a canonical hash, so key order and defaults do not matter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import Any, Final, Literal

import msgspec
from django.db.models import Q

from telemetry.digests import stored_digest
from telemetry.ingest.call_keys import stored_call_keys
from telemetry.models import LLMCall
from telemetry.schemas import RECORD_DEFAULTS, RecordIn
from telemetry.utc_text import is_canonical_utc

# `json.dumps` with any non-default option builds a `JSONEncoder` per call (a tenth of the hash's
# CPU on a 1,000-record batch, make bench P1); this is the encoder it builds, made once. The
# encoder keeps no state between calls, so the text is the same (tests/db/test_canonical_hash).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# The C encoder `_CANONICAL.encode` makes on every call (`JSONEncoder.iterencode`), with the same
# options, made once rather than per record (the texts, so the hashes, are the same).
# Without circular-reference markers, which a payload (a decoded JSON document) cannot need.
# None on an interpreter without the C `_json` (then `_CANONICAL.encode` does it all).
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_ESCAPE = getattr(json.encoder, "c_encode_basestring", None)
_ENCODE_DICT = (
    None
    if _MAKE_ENCODER is None or _ESCAPE is None
    else _MAKE_ENCODER(
        None,
        _CANONICAL.default,
        _ESCAPE,
        _CANONICAL.indent,
        _CANONICAL.key_separator,
        _CANONICAL.item_separator,
        _CANONICAL.sort_keys,
        _CANONICAL.skipkeys,
        _CANONICAL.allow_nan,
    )
)


def canonical_hash(value: object) -> str:
    """SHA-256 of `value` as canonical JSON: sorted keys, no spaces, UTF-8 (lone surrogates
    kept as they are, so the hash never fails on what a log stores verbatim), in hex."""
    return _canonical_sha256(value).hexdigest()


def _canonical_sha256(value: object) -> hashlib._Hash:
    if type(value) is dict and _ENCODE_DICT is not None:
        canonical = "".join(_ENCODE_DICT(value, 0))
    else:
        canonical = _CANONICAL.encode(value)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass"))


# msgspec's JSON with keys sorted: for a plain value (`safejson.is_plain`: JSON's own types, no
# float, no lone surrogate) the same bytes as `canonical_hash`'s text in UTF-8 (same escapes,
# keys in code-point order, compact), at a third of its CPU; tests/db/test_canonical_hash.py
# holds the two equal over drawn values.
_SORTED_JSON = msgspec.json.Encoder(order="sorted")
# The fields `exclude_defaults` leaves out when they hold their default, with those defaults
# (a default factory's value too, should a field ever get one).
_DEFAULTS = RECORD_DEFAULTS
# Fields that say who reported a call or what the session is, not what the call was: never
# hashed, so a report that names the agent (or carries session metadata) and one that does not
# are the same call (a duplicate, not a conflict).
UNHASHED: Final = frozenset({"agent", "metadata"})


def payload_hash(
    record: RecordIn, plain: Mapping[str, Any] | None = None, canonical_at: bool = False
) -> bytes:
    """SHA-256 of the record as submitted, in its stored form (`stored_digest`), canonical: sorted keys, defaults excluded, `at` in UTC.

    Server defaults (a missing `at`, `call` 0) never enter it, so a replay that leaves `at` out
    matches the stored call although the server stamped that call with its arrival time; nor
    does `UNHASHED` (who reported the call).

    `plain`: the object `record` was validated from, when `safejson.is_plain` holds for it.
    Every field but `at` and `prefix` validates to what was sent (text, strict integers, JSON
    objects and lists as they are), so without a `prefix` (models whose own defaults are left
    out) the canonical form is that object less its defaults, `at` in UTC, and its text comes
    from `_SORTED_JSON`, a third of the general path's cost, the same hashes (make bench P1;
    tests/db/test_canonical_hash.py draws records to hold them equal). `canonical_at`: `plain`'s
    `at`, when it is text, is known to be in that spelling already (`validation.usual_record`
    took it only so), so it is not tested again (tests/db/test_typed_records.py holds such
    records' hashes equal to their validated twins').
    """
    digest = _record_hash
    if plain is not None and record.prefix is None:
        data = {
            name: value
            for name, value in plain.items()
            if name not in _DEFAULTS or (value != _DEFAULTS[name] and name not in UNHASHED)
        }
        digest = _plain_hash
        sent = data.get("at")
        if type(sent) is str and (canonical_at or is_canonical_utc(sent)):
            # `at` as sent is the text it canonicalises to: its conversion and its formatting
            # were a third of this function per record (docs/performance.md, P1)
            return digest(data)
    else:
        data = record.model_dump(mode="python", exclude_defaults=True, exclude=set(UNHASHED))
    if record.at is not None:
        data["at"] = record.at.astimezone(UTC).isoformat()
    return digest(data)


def _record_hash(value: object) -> bytes:
    """`canonical_hash` of a record's canonical form, stored (`stored_digest`)."""
    return stored_digest(_canonical_sha256(value))


def _plain_hash(value: object) -> bytes:
    """`canonical_hash` of a plain value (`safejson.is_plain`), through `_SORTED_JSON`,
    stored (`stored_digest`)."""
    return stored_digest(hashlib.sha256(_SORTED_JSON.encode(value)))


# A stored call's keys: (session_id, turn, call, request_id, payload_hash).
StoredCall = tuple[int, int, int, str | None, bytes]


class StoredKeys:
    """The payload hashes already stored under the keys a submission may touch (one query).

    `decide` classifies a record and, for a new one, reserves its keys, so a second record with
    the same key later in the same submission is a duplicate or a conflict of the first.
    """

    def __init__(
        self,
        positions: Iterable[tuple[int, int]],
        requests: Iterable[tuple[int, str]],
        *,
        read: Iterable[StoredCall] = (),
    ) -> None:
        """`positions`: the (session, turn) pairs of the submission's records; `requests`: their
        (session, request id) pairs. Every stored call of those turns and under those request
        ids is read (on PostgreSQL exactly those, by index; elsewhere a superset). `read`: stored
        calls the caller read already (under the records' request ids, passed no `requests`),
        taken beside them."""
        self._empty()
        self._load(read)
        pairs, named = sorted(set(positions)), sorted(set(requests))
        existing = stored_call_keys(LLMCall, pairs, named)
        if existing is None:  # not PostgreSQL: the ORM
            existing = list(
                LLMCall.objects.filter(session_id__in={sid for sid, _ in pairs})
                .filter(
                    Q(turn__in={turn for _, turn in pairs})
                    | Q(request_id__in=[rid for _, rid in named])
                )
                .values_list("session_id", "turn", "call", "request_id", "payload_hash")
            )
        self._load(existing)

    @classmethod
    def of_rows(cls, existing: Iterable[StoredCall]) -> StoredKeys:
        """The stored keys `existing` as already read, (session_id, turn, call, request_id,
        payload_hash) each: every stored call of the submission's turns and under its request
        ids (`call_keys.insert_and_derive` reads them beside a single record's insert)."""
        keys = cls.__new__(cls)
        keys._empty()
        keys._load(existing)
        return keys

    def _empty(self) -> None:
        self.by_position: dict[tuple[int, int, int], bytes] = {}
        self.by_request: dict[tuple[int, str], bytes] = {}
        # (session, turn) pairs that held a call before this submission: every stored call of
        # the submission's turns is read here, so a pair absent from it had none.
        self.stored_turns: set[tuple[int, int]] = set()

    def _load(self, existing: Iterable[StoredCall]) -> None:
        for sid, turn, call, request_id, digest in existing:
            self.by_position[(sid, turn, call)] = digest
            self.stored_turns.add((sid, turn))
            if request_id is not None:
                self.by_request[(sid, request_id)] = digest

    def calls_by_turn(self, pairs: Iterable[tuple[int, int]]) -> dict[tuple[int, int], list[int]]:
        """The call numbers, sorted, of each (session, turn) in `pairs` that holds calls: those
        stored before this submission and those `decide` has reserved since (every stored call
        of the submission's turns was read, so nothing else exists under the session lock)."""
        wanted = set(pairs)
        found: dict[tuple[int, int], list[int]] = {}
        for sid, turn, call in self.by_position:
            if (sid, turn) in wanted:
                found.setdefault((sid, turn), []).append(call)
        for calls in found.values():
            calls.sort()
        return found

    def decide(
        self, session_pk: int, record: RecordIn, digest: bytes
    ) -> tuple[Literal["created", "duplicate", "conflict"], str | None, str | None]:
        """(status, field, detail): `created`, `duplicate`, or `conflict` naming the key."""
        if record.request_id is not None and (session_pk, record.request_id) in self.by_request:
            if self.by_request[(session_pk, record.request_id)] == digest:
                return "duplicate", None, None
            return "conflict", "request_id", "request_id: already stored with different content"
        position = (session_pk, record.turn, record.call)
        if position in self.by_position:
            if self.by_position[position] == digest:
                return "duplicate", None, None
            return (
                "conflict",
                "call",
                f"turn {record.turn} call {record.call} of session {record.session_id!r} "
                "is already stored with different content",
            )
        self.by_position[position] = digest
        if record.request_id is not None:
            self.by_request[(session_pk, record.request_id)] = digest
        return "created", None, None
