"""Identifier parts for the archive search index, and the query parser (pure)."""

from __future__ import annotations

import importlib

from hypothesis import given
from hypothesis import strategies as st

from compaction.search_terms import (
    TERMS_SEPARATOR,
    identifier_parts,
    index_terms,
    parse_query,
    postgres_tsquery,
    readable_part,
    searchable,
    snippet_pieces,
    sqlite_match,
)


def test_each_identifier_style_splits_into_its_parts():
    assert identifier_parts("Acme.Billing.ReviewSessionRegistry") == [
        "acme",
        "billing",
        "review",
        "session",
        "registry",
    ]
    assert identifier_parts("review_session_registry.ex") == ["review", "session", "registry", "ex"]
    assert identifier_parts("lib/acme/billing/invoice-registry.ex") == [
        "lib",
        "acme",
        "billing",
        "invoice",
        "registry",
        "ex",
    ]
    assert identifier_parts("https://api.acme.io/v2/SessionRegistry?id=7") == [
        "https",
        "api",
        "acme",
        "io",
        "v",
        "2",
        "session",
        "registry",
        "id",
        "7",
    ]
    assert identifier_parts("HTTPServer") == ["http", "server"]
    assert identifier_parts("parseJSONBody") == ["parse", "json", "body"]
    assert identifier_parts("José") == ["josé"]


def test_index_terms_hold_parts_and_glued_runs_of_consecutive_parts():
    terms = index_terms("see Acme.Billing.ReviewSessionRegistry for it").split()
    for term in ("registry", "sessionregistry", "reviewsessionregistry", "billingreview"):
        assert term in terms
    assert "acmeregistry" not in terms  # not consecutive
    assert index_terms("plain prose only") == ""


def test_the_search_text_keeps_the_readable_text_in_front():
    text = "call Foo.barBaz()"
    stored = searchable(text)
    assert stored.startswith(text + TERMS_SEPARATOR)
    assert readable_part(stored) == text
    assert searchable("no identifiers here") == "no identifiers here"


def test_a_query_word_is_looked_up_as_its_glued_parts():
    query = parse_query("SessionRegistry session_registry Registr*")
    words = [(t.words, t.prefix) for group in query.groups for t in group]
    assert words == [
        (("sessionregistry",), False),
        (("sessionregistry",), False),
        (("registr",), True),
    ]
    assert postgres_tsquery(query) == "('sessionregistry') & ('sessionregistry') & ('registr':*)"
    assert sqlite_match(query) == '("sessionregistry") AND ("sessionregistry") AND ("registr"*)'


def test_or_phrases_and_exclusions():
    query = parse_query('"nightly build" OR deploy -flaky')
    assert postgres_tsquery(query) == "(('nightly' <-> 'build') | 'deploy') & !'flaky'"
    assert sqlite_match(query) == '("nightly build" OR "deploy") NOT "flaky"'


def test_query_syntax_never_reaches_the_database():
    query = parse_query("a'b & c:* | !d ( ) NEAR\"")
    for group in query.groups:
        for term in group:
            assert all(word.isalnum() for word in term.words)


@given(st.text(max_size=200))
def test_any_text_parses_to_alphanumeric_terms(text):
    query = parse_query(text)
    for group in (*query.groups, query.excluded):
        for term in group:
            assert term.words and all(word.isalnum() for word in term.words)
    index_terms(text)  # never raises


def test_snippets_mark_the_words_that_contain_a_query_part():
    query = parse_query("Registry")
    pieces = snippet_pieces("x " * 100 + "use Acme.Billing.InvoiceRegistry now", query)
    assert ("mark", "InvoiceRegistry") in pieces
    assert pieces[0] == ("text", "…")


# --- the faster extraction equals the first one ---------------------------------------------


# `index_terms` as first written (one identifier at a time, every occurrence split anew), kept
# frozen in the migration that indexed the archives stored before it: the oracle for the faster
# version, which must produce the same string (so old rows and new ones are searched alike).
_index_terms_oracle = importlib.import_module(
    "compaction.migrations.0004_search_identifier_parts"
).index_terms


# Identifier-ish text: words in every casing, digits, the separators identifiers and paths use,
# non-ASCII letters, and repeats (the faster version splits a repeated word once).
_PIECES = st.sampled_from(
    ["Acme", "billing", "HTTP", "Server", "json", "X", "v2", "42", "José", "漢字", "é", "_"]
    + list(".:/\\@#$%+~=?&-")
    + [" ", "\n", "(", ")", '"', ",", "\x1f"]
)
_IDENTIFIERISH = st.lists(st.one_of(_PIECES, st.text(max_size=3)), max_size=60).map("".join)


@given(st.lists(_IDENTIFIERISH, min_size=1, max_size=4))
def test_faster_index_terms_equal_the_original(texts):
    # Several texts in a row: the remembered terms of one text must not leak into the next.
    for text in [*texts, " ".join(texts), texts[0] * 3]:
        assert index_terms(text) == _index_terms_oracle(text)
        expected = text + TERMS_SEPARATOR + _index_terms_oracle(text)
        assert searchable(text) == (expected if _index_terms_oracle(text) else text)
