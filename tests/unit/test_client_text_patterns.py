"""Every pattern that scans client-supplied text is linear in it (pure).

Agents send error texts, transcripts and model ids of any length; a regex that backtracks over
them quadratically lets one small (gzipped) request hold a worker for minutes. Each function and
pattern here gets a megabyte of its worst case and must stay within `RATIO` times a linear
regex scan of the same text (`tests.linearity`). A regex added to telemetry/, compaction/ or
console/ fails `test_every_regex_in_the_apps_is_listed_here` until it is listed and checked.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from pathlib import Path
from typing import Final

import pytest

from compaction import search_terms
from compaction.imports import files
from console import periods, view_rules
from telemetry import (
    cache_misses,
    pricing,
    safejson,
    session_meta,
    tag_rules,
    utc_text,
    windows,
    zones,
)
from telemetry.otlp import mapping
from telemetry.otlp.claude_code import map_log_records
from telemetry.otlp.wire import LogRecord, cut_too_deep
from tests.linearity import MEGABYTE, RATIO, ratio_to_linear

REPO: Final = Path(__file__).resolve().parents[2]
N: Final = MEGABYTE

# The worst cases: long runs of what the patterns repeat, with and without separators.
ADVERSARIAL: Final = {
    "digits": "1" * N,
    "digits and commas": "1," * (N // 2),
    "capitals": "A" * N,
    "letters then a word": "A" * N + " needle",
    "spaces after a digit": "1" + " " * N + "x",
    "escaped quotes": '"\\' * (N // 2),
    "too long and digits": "prompt is too long: " + "1" * N,
    "tokens > repeated": "1 tokens > " * (N // 11),
    "an open tag never closed": "<" + "-" * N,
    "open tags": "<a" * (N // 2),
    "spaces and tabs": " \t" * (N // 2) + "x",
}

# Every module-level pattern that reads client text, by name.
CLIENT_TEXT_PATTERNS: Final = {
    **{f"windows.{p.pattern[:30]}": p for p in windows.OVERFLOW_PATTERNS},
    "search_terms._IDENTIFIER": search_terms._IDENTIFIER,
    "search_terms._ALNUM": search_terms._ALNUM,
    "search_terms._HUMP": search_terms._HUMP,
    "search_terms._QUERY_TOKEN": search_terms._QUERY_TOKEN,
    "search_terms.hit_words": search_terms.hit_words(["need", "a", "1"]),
    "cache_misses._VOLATILE": cache_misses._VOLATILE,
    "utc_text._CANONICAL_UTC": utc_text._CANONICAL_UTC,
    "pricing._BEDROCK": pricing._BEDROCK,
    "pricing._DATED": pricing._DATED,
    "pricing._DOTTED_VERSION": pricing._DOTTED_VERSION,
    "safejson._SURROGATE": safejson._SURROGATE,
    "files._UUID_TAIL": files._UUID_TAIL,
    "session_meta._KEY": session_meta._KEY,
    "session_meta._SPACE": session_meta._SPACE,
    "session_meta._TAGS": session_meta._TAGS,
    "tag_rules._TAG": tag_rules._TAG,
    "tag_rules._SPACE": tag_rules._SPACE,
    "tag_rules._SEPARATOR": tag_rules._SEPARATOR,
    "zones._ZONE_NAME": zones._ZONE_NAME,
    "periods._DATE": periods._DATE,
    "view_rules._SPACE": view_rules._SPACE,
    "view_rules._CONTROL": view_rules._CONTROL,
    "mapping._CONTROL": mapping._CONTROL,
}

# Where the apps use `re`, and how often: a new use fails the test below until it is checked
# (linear on ADVERSARIAL, or reading only text the console itself made) and counted here.
# console/presenters/transcripts.py: the summary header's seq span (digits bounded), the omission
# marker (a literal prefix); console/presenters/search.py: the <mark> tags of our own snippets; console/views.py: a file name from a
# session id of at most 200 characters; console_format.py: escaped query words, literal only;
# ingest/statements.py: SQL we wrote; mapping.py: `as_count`'s anchored digits, and `shown`'s
# control characters (a character class, listed above, on at most 100 characters); wire.py: the pieces of
# JSON nested too deep (`test_cutting_json_nested_too_deep_is_linear`); console/docs_site.py:
# the built documentation site and mkdocs.yml of this repository, never a client's text;
# compaction/export_api.py: `before`'s date-time prefix, anchored and fixed-width (`match` reads
# at most 16 characters whatever the text's length); console/parts.py: the part fences of HTML the
# console rendered itself (a client's text in it is escaped, so it never holds a fence's `<!--`);
# telemetry/compiled.py: the `%s` / `%%` marks of SQL the ORM wrote, two fixed characters, read
# before any value is written into it.
REGEX_USES: Final = {
    "compaction/export_api.py": 1,
    "compaction/imports/files.py": 1,
    "compaction/search_terms.py": 5,
    "console/presenters/search.py": 1,
    "console/presenters/transcripts.py": 2,
    "console/docs_site.py": 4,
    "console/parts.py": 1,
    "console/periods.py": 1,
    "console/view_rules.py": 2,
    "console/templatetags/console_format.py": 1,
    "console/views.py": 1,
    "telemetry/ingest/statements.py": 1,
    "telemetry/cache_misses.py": 1,
    "telemetry/compiled.py": 1,
    "telemetry/utc_text.py": 1,
    "telemetry/otlp/mapping.py": 2,
    "telemetry/otlp/wire.py": 1,
    "telemetry/pricing.py": 3,
    "telemetry/safejson.py": 1,
    "telemetry/session_meta.py": 3,
    "telemetry/tag_rules.py": 3,
    "telemetry/zones.py": 1,
}
_REGEX_USE: Final = re.compile(
    r"\bre\.(?:compile|search|match|fullmatch|sub|subn|findall|finditer|split)\("
)


def test_every_regex_in_the_apps_is_listed_here():
    found: Counter[str] = Counter()
    for app in ("telemetry", "compaction", "console"):
        for path in (REPO / app).rglob("*.py"):
            if "migrations" not in path.parts:
                uses = len(_REGEX_USE.findall(path.read_text(encoding="utf-8")))
                if uses:
                    found[path.relative_to(REPO).as_posix()] = uses
    assert dict(found) == REGEX_USES


@pytest.mark.parametrize("case", sorted(ADVERSARIAL))
@pytest.mark.parametrize("name", sorted(CLIENT_TEXT_PATTERNS))
def test_each_client_text_pattern_is_linear_on_a_megabyte_of_its_worst_cases(name, case):
    pattern = CLIENT_TEXT_PATTERNS[name]

    def scan(text: str) -> None:
        for _ in pattern.finditer(text):
            pass

    assert ratio_to_linear(scan, ADVERSARIAL[case]) < RATIO


@pytest.mark.parametrize(
    "text",
    [
        "1" * N,
        "prompt is too long: " + "1," * (N // 2),
        "maximum context length is " + "1" * N,
        "maximum context length is 128000 tokens, resulted in " + "1" * N,
    ],
    ids=["digits", "anthropic commas", "openai", "openai resulted in"],
)
def test_reading_an_overflow_text_is_linear(text):
    def parse(value: str) -> None:
        # too many digits is refused (another test's point); the time to say so is this one's
        with contextlib.suppress(ValueError):
            windows.parse_overflow_limit(value)

    assert ratio_to_linear(parse, text) < RATIO


@pytest.mark.parametrize(
    "text",
    [
        "[" * N,
        "[" * 300 + "[]," * (N // 3) + "1",
        "[" * 300 + '"\\"",' * (N // 6) + "1",
        "[" * 300 + '[""],' * (N // 5) + "1",
    ],
    ids=["openers", "empty arrays", "strings", "arrays of a string"],
)
def test_cutting_json_nested_too_deep_is_linear(text):
    assert ratio_to_linear(lambda t: cut_too_deep(t.encode()), text) < RATIO


def _api_error(error: str, **attrs: str) -> LogRecord:
    return LogRecord(
        time_ns=1_764_547_200_000_000_000,
        observed_ns=0,
        body=None,
        event_name="",
        attributes={"event.name": "api_error", "session.id": "cc-1", "error": error, **attrs},
        resource={},
        trace_id="",
        span_id="",
    )


def test_mapping_a_claude_code_api_error_is_linear_in_its_text():
    text = "prompt is too long " + "1" * N
    assert ratio_to_linear(lambda t: map_log_records([_api_error(t)]), text) < RATIO


@pytest.mark.parametrize(
    "text",
    ["A" * N + " needle", "1" * N + " needle", "AAAAAAAAAAAAAAA=" * (N // 16) + " needle"],
    ids=["letters", "digits", "base64 of zeros"],
)
def test_a_snippet_is_linear_in_a_long_run_before_the_hit(text):
    query = search_terms.parse_query("needle")
    pieces = search_terms.snippet_pieces(text, query)
    assert ("mark", "needle") in pieces
    assert ratio_to_linear(lambda t: search_terms.snippet_pieces(t, query), text) < RATIO


def test_an_overflow_text_stating_a_number_of_thousands_of_digits_is_refused_naming_the_field():
    text = f"prompt is too long: {'9' * 5000} tokens > 200000 maximum"
    with pytest.raises(ValueError, match=r"^detail: states a number of 5000 digits"):
        windows.parse_overflow_limit(text)
    assert windows.parse_overflow_limit(text.replace("9" * 5000, "9" * 18)) == (
        windows.OverflowLimit(200_000, 10**18 - 1)
    )


def test_an_api_error_with_a_token_count_of_thousands_of_digits_is_rejected_alone():
    good = _api_error("prompt is too long: 212,959 tokens > 200000 maximum")
    bad = _api_error(f"prompt is too long: {'9' * 5000} tokens > 200000 maximum")
    mapped = map_log_records([bad, good])
    assert [(r.index, r.field) for r in mapped.rejected] == [(0, "error")]
    assert [e.tokens_before for e in mapped.events] == [212_959]


@pytest.mark.parametrize("stamp", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_event_timestamp_with_no_utc_time_is_rejected_naming_the_field(stamp):
    good = _api_error("prompt is too long: 212,959 tokens > 200000 maximum")
    bad = _api_error("prompt is too long", **{"event.timestamp": stamp})
    mapped = map_log_records([good, bad])
    assert [(r.index, r.field) for r in mapped.rejected] == [(1, "event.timestamp")]
    assert len(mapped.events) == 1
