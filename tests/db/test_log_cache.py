"""The parsed-log cache is bounded by the characters it holds, whatever the sessions' sizes."""

from __future__ import annotations

from django.conf import settings

from compaction.log_cache import LOG_CACHE, HeldLogs, LogCache, ParsedLog


def entry(chars: int) -> ParsedLog:
    return ParsedLog(messages=[], last_row=("", "anthropic", None), chars=chars)


def test_the_cache_never_holds_more_characters_than_its_budget():
    cache = LogCache(budget_chars=100)
    for session, chars in enumerate([40, 30, 50, 10, 100, 20]):
        cache.put((session, ""), entry(chars))
        assert cache.total == sum(e.chars for e in cache.entries.values()) <= 100
    # least recently used first out: session 4 (100 chars) pushed out everything older, and
    # session 5 then pushed out 4
    assert list(cache.entries) == [(5, "")]


def test_a_log_larger_than_the_whole_budget_is_not_kept():
    cache = LogCache(budget_chars=100)
    cache.put((1, ""), entry(60))
    cache.put((2, ""), entry(101))
    assert cache.get((2, "")) is None
    assert cache.get((1, "")) is not None and cache.total == 60


def test_a_session_parsed_again_replaces_its_entry_and_its_count():
    cache = LogCache(budget_chars=100)
    cache.put((1, ""), entry(30))
    cache.put((1, ""), entry(70))
    assert cache.total == 70 and len(cache.entries) == 1


def test_a_zero_budget_keeps_nothing():
    cache = LogCache(budget_chars=0)
    cache.put((1, ""), entry(1))
    assert cache.entries == {} and cache.total == 0


def test_the_process_cache_takes_its_budget_from_the_settings():
    assert LOG_CACHE.budget == settings.COMPACTION_LOG_CACHE_CHARS == 8_000_000


def test_an_import_holds_each_session_from_its_latest_cut_whatever_the_budget():
    held = HeldLogs()
    held.put((1, "t"), entry(50_000_000))
    held.put((2, "t"), entry(10))
    held.put((1, "t@700"), entry(30))  # session 1 compacted at seq 700: its old parse goes
    assert list(held.entries) == [(2, "t"), (1, "t@700")] and held.total == 40
    assert LOG_CACHE.budget == 8_000_000  # the process cache keeps its own bound
