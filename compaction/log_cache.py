"""Parsed transcript logs kept between loads: the process cache and a caller's own hold.

The log is append-only and its rows never change, so a parsed prefix stays valid;
`compaction.transcripts` reads and extends these, validating each prefix by the stored hash of
its last row. No database access here.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

from django.conf import settings

from context_core import Message
from telemetry.models import AgentSession


@dataclass
class ParsedLog:
    messages: list[Message]
    last_row: tuple[str, str, int | None]  # (raw_hash, format, bound_cap) of the last message
    chars: int


# A session is known by its id and creation time: an id reused after a rollback is another session.
CacheKey = tuple[int, str]


class LogCache:
    """Parsed log prefixes per session, in this process.

    The log is append-only and its rows never change (but for log retention emptying the text
    of a message the surface no longer shows, which a parsed prefix then still holds: the same
    text, so nothing derived from it changes), so a parsed prefix stays valid; a load
    parses only the rows after it (an append to a long session, a relief job) instead of
    re-parsing the whole log. The prefix is trusted only while the stored hash of its last row
    still matches (a rolled-back append or a reused session id starts over).

    Memory bound: at most `budget_chars` message characters (`COMPACTION_LOG_CACHE_CHARS`, default
    8,000,000) per process, least recently used first out; a log larger than the whole budget is
    not kept. Parsed messages take about 2.6 bytes per ASCII character (measured on tool-result
    transcripts; up to ~4 for non-ASCII text), so the default holds ~21 MB (at most ~40 MB) per
    process: with gunicorn's default of two workers per core (`console.gunicorn_conf`) plus one
    per Celery worker process, multiply by the process count. 0 turns the cache off (every load
    parses the whole log from the database; nothing is lost, only CPU).
    """

    def __init__(self, budget_chars: int) -> None:
        self.budget = budget_chars
        self.entries: OrderedDict[CacheKey, ParsedLog] = OrderedDict()
        self.total = 0
        self.lock = threading.Lock()

    def get(self, session_id: CacheKey) -> ParsedLog | None:
        with self.lock:
            entry = self.entries.get(session_id)
            if entry is not None:
                self.entries.move_to_end(session_id)
            return entry

    def put(self, session_id: CacheKey, entry: ParsedLog) -> None:
        with self.lock:
            replaced = self.entries.pop(session_id, None)
            if replaced is not None:
                self.total -= replaced.chars
            if entry.chars > self.budget:
                return
            self.entries[session_id] = entry
            self.total += entry.chars
            while self.total > self.budget:
                _, evicted = self.entries.popitem(last=False)
                self.total -= evicted.chars


LOG_CACHE = LogCache(budget_chars=settings.COMPACTION_LOG_CACHE_CHARS)


class HeldLogs(LogCache):
    """A caller's own parse of its sessions' logs, held across appends: a transcript import.

    Appends that pass it read and parse only what they do not hold (nothing, when the holder
    made every append), and extend it with what they stored, whatever the process cache's
    budget: an import appends chunk after chunk to a log that can outgrow any budget, and
    re-reading it per chunk made the import quadratic. Validated like the process cache (the
    stored hash of the last held row), and one entry per session: a new agent cut replaces the
    parse from the old one, so it holds at most each session's log from its latest cut, which
    every append derives the surface from anyway. Drop it with the transaction it served: it
    may hold rows that a rollback removed.
    """

    def __init__(self) -> None:
        super().__init__(budget_chars=sys.maxsize)

    def put(self, session_id: CacheKey, entry: ParsedLog) -> None:
        with self.lock:
            for other in [key for key in self.entries if key[0] == session_id[0]]:
                self.total -= self.entries.pop(other).chars
        super().put(session_id, entry)


def cache_key(session: AgentSession, from_seq: int) -> CacheKey:
    created = session.created_at.isoformat() if session.created_at else ""
    return (session.pk, f"{created}@{from_seq}" if from_seq else created)
