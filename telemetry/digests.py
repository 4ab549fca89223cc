"""A payload hash's stored form (`LLMCall.payload_hash`, `telemetry.idempotency`).

The SHA-256's 32 raw bytes (bytea), half the 64 hex characters (65 bytes a row) it took as
text. Every writer stores this form; the export writes it as hex (`digest_text`) and the import
reads that back (`digest_from_text`). Migration 0029 converted the stored hex with its own
frozen copy of this rule (tests/db/test_migrations.py holds them equal).
"""

from __future__ import annotations

import hashlib
from typing import Final

DIGEST_BYTES: Final = 32


def stored_digest(digest: hashlib._Hash) -> bytes:
    """The stored form of a payload hash: its 32 raw bytes (the one definition)."""
    return digest.digest()


def digest_text(stored: bytes | memoryview) -> str:
    """A stored payload hash as its 64 lowercase hex characters (what the export writes)."""
    return bytes(stored).hex()


def digest_from_text(text: str) -> bytes:
    """The stored form of a payload hash written in hex (`digest_text`, an export's line): a
    ValueError unless `text` is 64 hex digits."""
    value = bytes.fromhex(text)
    if len(value) != DIGEST_BYTES:
        raise ValueError(f"a payload hash is {DIGEST_BYTES * 2} hex digits")
    return value
