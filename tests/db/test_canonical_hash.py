"""The canonical payload hash stays byte-identical to its first form (the oracle below): stored
calls keep their hashes, so a replay is still a duplicate and changed content still a conflict.
No database needed; Django's settings are (the module reads the calls table)."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from telemetry.idempotency import canonical_hash


def _oracle(value: object) -> str:
    """`canonical_hash` as it was first written: a fresh `json.dumps` per call."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


# Text with what JSON escapes, what it keeps verbatim (non-ASCII, astral) and lone surrogates.
_text = st.text(
    st.characters(codec=None, categories=None)
    | st.sampled_from(['"', "\\", "\n", "\x00", "\x7f", "é", "\U0001f600", "\ud83d", "\udc00"])
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=25,
)


@given(_json)
def test_the_canonical_hash_is_its_first_form_byte_for_byte(value):
    assert canonical_hash(value) == _oracle(value)


@given(st.dictionaries(_text, _json, max_size=6), st.dictionaries(_text, _json, max_size=6))
def test_one_hash_after_another_carries_nothing_over(first, second):
    # the shared encoder keeps no state between calls: each hash is the one a fresh encoder gives
    assert (canonical_hash(first), canonical_hash(second)) == (_oracle(first), _oracle(second))
