"""Which log a surface follows: a position (seq) and a hash of the log up to it.

A surface is derived from a prefix of the log. A client may stand it in for its own history only
when that prefix is what the client itself appended, message for message; otherwise the model
would see a transcript that is behind the agent's (a round missing, a call without its result).
The console states the position of every surface it serves; the client computes the same hash
over the messages it appended and compares.

The hash is a chain: `extend_log_hash(previous, content_digest(message))` from `LOG_HASH_START`,
so the console extends it per append without re-reading the log, and the client keeps one
value per seq. A message's digest is the SHA-256 of its canonical JSON (sorted keys, no
spaces, UTF-8, lone surrogates kept), its `seq` left out: the identity the log's idempotent
append already compares.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

# The hash of the empty log.
LOG_HASH_START = ""


def content_digest(value: object) -> str:
    """SHA-256 (hex) of `value` as canonical JSON: sorted keys, compact, UTF-8 with lone
    surrogates kept. A JSON value and its decode-encode round trip have the same digest."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def extend_log_hash(previous: str, digest: str) -> str:
    """The hash of a log one message longer: depends on every digest so far and their order."""
    return hashlib.sha256(f"{previous}:{digest}".encode("ascii")).hexdigest()


def log_hash(digests: Iterable[str], start: str = LOG_HASH_START) -> str:
    """The hash of the log whose messages have `digests`, in seq order (after `start`)."""
    value = start
    for digest in digests:
        value = extend_log_hash(value, digest)
    return value


@dataclass(frozen=True, slots=True)
class LogPosition:
    """The log a surface follows: its messages up to `seq` (inclusive), hashing to `hash`."""

    seq: int
    hash: str
