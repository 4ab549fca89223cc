"""A time's canonical text, as a payload hash spells a record's `at` (pure, standard library).

`telemetry.idempotency.payload_hash` hashes `at` as `isoformat()` of the time in UTC. A text
an agent sends already in that spelling needs neither the conversion nor the formatting.
"""

from __future__ import annotations

import re
from typing import Final

# A valid time of day, microseconds only when there are some (six digits, not all zero), the
# offset +00:00, ASCII digits: `isoformat()`'s spelling of a time in UTC. Linear: no repetition.
_CANONICAL_UTC: Final = re.compile(
    r"\d{4}-\d\d-\d\dT(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.(?!000000)\d{6})?\+00:00", re.ASCII
)


def is_canonical_utc(text: str) -> bool:
    """Whether `text`, read as an aware datetime (`RecordIn.at`), is `isoformat()` of that time
    in UTC: then it is its own canonical form. Only for a text the reading accepted (it checks
    the calendar). tests/db/test_canonical_hash.py holds `payload_hash` equal to the general
    path over times drawn in every spelling."""
    return _CANONICAL_UTC.fullmatch(text) is not None
