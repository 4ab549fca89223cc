"""Search terms that find code: identifiers indexed by their parts, queries parsed the same way.

Standard library only. PostgreSQL's parser reads `Acme.Billing.InvoiceRegistry` as one host
name and SQLite's unicode61 never splits `InvoiceRegistry`, so a search for `Registry` missed
them. Each archived chunk's `search` text therefore carries, after `TERMS_SEPARATOR`, the parts
of every compound identifier in it (dotted, snake_case, kebab-case, camelCase, paths, URLs) and
every run of up to `MAX_COMPOUND` consecutive parts glued together (`sessionregistry`). A query
word is split the same way and looked up as its glued form, so `SessionRegistry`,
`session_registry` and `Billing.ReviewSessionRegistry` all find
`Acme.Billing.ReviewSessionRegistry`; a trailing `*` searches by prefix (`Registr*`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Final, Literal

# Between the readable text and the identifier terms: a control character both databases'
# tokenizers treat as a separator, and that readable text (decoded JSON strings) never needs.
TERMS_SEPARATOR: Final = "\n\x1f\n"

# Glue at most this many consecutive parts: `a.b.c.d.e.f` yields 5+4+3+2 compounds, not 2^n.
MAX_COMPOUND: Final = 6

# A run of characters an identifier, path or URL is made of.
_IDENTIFIER: Final = re.compile(r"[\w.:/\\@#$%+~=?&-]+")
# Letters-and-digits runs (Unicode): what separators (. _ - / : …) leave.
_ALNUM: Final = re.compile(r"[^\W_]+")
# camelCase and PascalCase humps, acronyms kept whole: HTTPServer → HTTP, Server.
_HUMP: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")


_NO_TERMS: Final[Mapping[str, None]] = MappingProxyType({})


def identifier_parts(word: str) -> list[str]:
    """The lower-cased parts of one identifier-like word, in order.

    `Acme.Billing.ReviewSessionRegistry` → acme, billing, review, session, registry;
    `review_session_registry.ex` → review, session, registry, ex; `HTTPServer2` → http,
    server, 2. A plain word is its own single part.
    """
    parts: list[str] = []
    for run in _ALNUM.findall(word):
        humps = _HUMP.findall(run) if run.isascii() else [run]
        parts.extend(hump.lower() for hump in (humps or [run]))
    return parts


def index_terms(text: str) -> str:
    """The extra terms to index for `text`: each compound identifier's parts and its glued runs
    of 2..MAX_COMPOUND consecutive parts, each term once, in first-seen order. "" when
    `text` has no compound identifier (plain prose needs nothing extra).

    Each distinct word is split once (a repeated word adds no new term, so skipping repeats
    keeps the order), and a word's terms are remembered across calls: archive text repeats the
    same identifiers chunk after chunk, and this runs over every archived character (P6)."""
    seen: dict[str, None] = {}
    for word in dict.fromkeys(_IDENTIFIER.findall(text)):
        terms = _word_terms(word)
        if terms:
            seen.update(terms)
    return " ".join(seen)


@lru_cache(maxsize=1 << 14)
def _word_terms(word: str) -> Mapping[str, None]:
    """One word's index terms in first-seen order (none for fewer than two parts)."""
    parts = identifier_parts(word)
    if len(parts) < 2:
        return _NO_TERMS
    terms: dict[str, None] = {}
    for start in range(len(parts)):
        terms.setdefault(parts[start], None)
        for stop in range(start + 2, min(start + MAX_COMPOUND, len(parts)) + 1):
            terms.setdefault("".join(parts[start:stop]), None)
    return terms


def searchable(readable: str) -> str:
    """What a chunk's `search` column holds: the readable text, then its identifier terms."""
    terms = index_terms(readable)
    return readable + TERMS_SEPARATOR + terms if terms else readable


def readable_part(search: str) -> str:
    """The readable text of a `search` value (the identifier terms left out)."""
    return search.split(TERMS_SEPARATOR, 1)[0]


# --- queries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Term:
    """One query word as the index holds it: its glued parts, optionally a prefix.

    `words` has one entry for a word, several for a quoted phrase (consecutive in the text).
    `highlight` are the parts to mark in a snippet.
    """

    words: tuple[str, ...]
    prefix: bool
    highlight: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Query:
    """Groups are AND-ed; the terms inside a group are OR-ed; `excluded` terms must not occur."""

    groups: tuple[tuple[Term, ...], ...]
    excluded: tuple[Term, ...]

    @property
    def empty(self) -> bool:
        return not self.groups


_QUERY_TOKEN: Final = re.compile(r'(-?)"([^"]*)"|(\S+)')


def parse_query(text: str) -> Query:
    """Parse a search box: words (AND), `OR` between words, `-word` to exclude, `"a phrase"`,
    `word*` for a prefix. Anything else is text, never syntax: the result holds only letters
    and digits, so nothing a user types reaches the database's query language."""
    groups: list[list[Term]] = []
    excluded: list[Term] = []
    pending_or = False
    for match in _QUERY_TOKEN.finditer(text):
        negate, phrase, word = match.group(1) == "-", match.group(2), match.group(3)
        if word is not None and word == "OR":
            pending_or = bool(groups)
            continue
        if word is not None and word.startswith("-") and len(word) > 1:
            negate, word = True, word[1:]
        term = _phrase_term(phrase) if phrase is not None else _word_term(word or "")
        if term is None:
            continue
        if negate:
            excluded.append(term)
        elif pending_or:
            groups[-1].append(term)
        else:
            groups.append([term])
        pending_or = False
    return Query(tuple(tuple(group) for group in groups), tuple(excluded))


def _word_term(word: str) -> Term | None:
    prefix = word.endswith("*")
    parts = identifier_parts(word.rstrip("*"))
    if not parts:
        return None
    return Term(("".join(parts),), prefix, tuple(parts))


def _phrase_term(phrase: str) -> Term | None:
    words = tuple("".join(parts) for w in phrase.split() if (parts := identifier_parts(w)))
    highlight = tuple(part for w in phrase.split() for part in identifier_parts(w))
    return Term(words, False, highlight) if words else None


def postgres_tsquery(query: Query) -> str:
    """`query` in `to_tsquery` syntax (every lexeme quoted; words are letters and digits)."""

    def term(t: Term) -> str:
        lexemes = [f"'{word}'" for word in t.words]
        if t.prefix:
            lexemes[-1] += ":*"
        return lexemes[0] if len(lexemes) == 1 else "(" + " <-> ".join(lexemes) + ")"

    positive = " & ".join("(" + " | ".join(term(t) for t in group) + ")" for group in query.groups)
    negative = "".join(f" & !{term(t)}" for t in query.excluded)
    return positive + negative


def sqlite_match(query: Query) -> str:
    """`query` in FTS5 MATCH syntax (each word a quoted string)."""

    def term(t: Term) -> str:
        quoted = '"' + " ".join(t.words) + '"'
        return quoted + ("*" if t.prefix else "")

    positive = " AND ".join(
        "(" + " OR ".join(term(t) for t in group) + ")" for group in query.groups
    )
    negative = "".join(f" NOT {term(t)}" for t in query.excluded)
    return positive + negative


# --- snippets ----------------------------------------------------------------------------------

SnippetPiece = tuple[Literal["text", "mark"], str]


def snippet_pieces(
    text: str, query: Query, *, before: int = 80, after: int = 200
) -> list[SnippetPiece]:
    """A window of `text` around the first hit, as pieces to escape and mark.

    A word is marked when it contains a query part (case-insensitive; long parts match by
    their first len−2 characters so `failed` marks `failing`, as the stemmer would). With no
    visible hit (a stemmed or glued match) the window is the start of the text.
    """
    needles = sorted(
        {_stem_prefix(part) for group in query.groups for t in group for part in t.highlight},
        key=len,
        reverse=True,
    )
    if not needles:
        return [("text", _clip(text, 0, before + after))]
    pattern = hit_words(needles)
    first = pattern.search(text)
    start = 0 if first is None else max(first.start() - before, 0)
    stop = min(len(text), (0 if first is None else first.end()) + after)
    if first is None:
        stop = min(len(text), before + after)
    window = text[start:stop]
    pieces: list[SnippetPiece] = []
    if start > 0:
        pieces.append(("text", "…"))
    cursor = 0
    for hit in pattern.finditer(window):
        if hit.start() > cursor:
            pieces.append(("text", window[cursor : hit.start()]))
        pieces.append(("mark", hit.group()))
        cursor = hit.end()
    if cursor < len(window):
        pieces.append(("text", window[cursor:]))
    if stop < len(text):
        pieces.append(("text", "…"))
    return pieces


def hit_words(needles: Sequence[str]) -> re.Pattern[str]:
    """The letters-and-digits words that contain one of `needles` (case-insensitive).

    A match may start only where a word starts (the lookbehind): tried from every letter of a
    long run, the leading word pattern rescanned the rest of the run each time, quadratic in
    its length (a base64 run of "AAAA…" before the hit). Linear in the text times the needles.
    """
    alternatives = "|".join(re.escape(n) for n in needles)
    return re.compile(r"(?<![^\W_])[^\W_]*(?:" + alternatives + r")[^\W_]*", re.IGNORECASE)


def _stem_prefix(part: str) -> str:
    return part[: max(len(part) - 2, 4)] if len(part) > 5 else part


def _clip(text: str, start: int, stop: int) -> str:
    return text[start:stop] + ("…" if stop < len(text) else "")
