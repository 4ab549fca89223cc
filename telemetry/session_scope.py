"""Reads of calls and turns by time, restricted to the sessions that can hold them.

A read of calls or turns that names no session has to visit every stored row of the table (a
table of calls that keeps idle sessions packed would unpack every one of them); a read that
names its sessions visits theirs alone. A time-bounded read gets its sessions from their index
on `AgentSession.last_seen_at`, by this rule:

    a stored call's `at`, and a stored turn's `last_at`, are never later than its session's
    `last_seen_at`.

`last_seen_at` is the maximum of the session's turns' `last_at`, each the maximum of its calls'
`at` (`telemetry.figures.SESSION_TOTALS`, `telemetry.session_totals.advance`: a late call with
an old `at` leaves it as it was, a new one raises it). Retention removes calls and turns and
never lowers it (a re-derivation over fewer turns gives the maximum of what is left, still
not earlier than any of it). An imported session keeps the stored figures or takes the
export's, and the import raises `last_seen_at` to its latest restored call
(`telemetry.session_state.cover_calls`), so the rule holds whatever the file says.

So the calls at or after `since` are the calls at or after `since` of the sessions seen at
or after `since`; the tests hold each scoped read to its unscoped form.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Final

from telemetry.models import AgentSession

# Sessions a scoped read names at once: far below SQLite's limit on a statement's parameters.
SESSION_CHUNK: Final = 500


def sessions_seen_since(since: datetime, chunk: int = SESSION_CHUNK) -> Iterator[dict[int, int]]:
    """Session id -> profile id of every session seen at or after `since`, by ascending id,
    `chunk` sessions at a time. One query (on `last_seen_at`'s index), read up front."""
    found = list(
        AgentSession.objects.filter(last_seen_at__gte=since)
        .order_by("pk")
        .values_list("pk", "profile_id")
    )
    for start in range(0, len(found), chunk):
        yield dict(found[start : start + chunk])
