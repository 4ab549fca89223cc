"""The log position a surface follows: the hash chain is order- and content-sensitive, and
extending it per append equals hashing the whole log at once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from context_core import LOG_HASH_START, content_digest, extend_log_hash, log_hash

_messages = st.lists(
    st.dictionaries(st.sampled_from(["role", "content", "id"]), st.text(max_size=8), min_size=1),
    max_size=8,
)


@given(_messages, st.integers(min_value=0, max_value=8))
def test_extending_the_chain_per_append_equals_hashing_the_whole_log(messages, cut):
    digests = [content_digest(m) for m in messages]
    cut = min(cut, len(digests))
    assert log_hash(digests[cut:], log_hash(digests[:cut])) == log_hash(digests)


@given(_messages)
def test_the_log_hash_changes_when_a_message_is_missing_changed_or_moved(messages):
    digests = [content_digest(m) for m in messages]
    whole = log_hash(digests)
    assert log_hash(digests[:-1]) != whole or not digests
    if len(set(digests)) > 1:
        assert log_hash(list(reversed(digests))) != whole or digests == digests[::-1]
    if digests:
        assert log_hash([*digests[:-1], content_digest({"other": True})]) != whole or (
            digests[-1] == content_digest({"other": True})
        )


def test_the_digest_ignores_key_order_and_keeps_non_ascii_and_lone_surrogates():
    assert content_digest({"a": 1, "b": "é"}) == content_digest({"b": "é", "a": 1})
    assert content_digest({"t": "\ud83d"}) != content_digest({"t": "\ud83e"})
    assert extend_log_hash(LOG_HASH_START, content_digest(1)) == log_hash([content_digest(1)])
    assert log_hash([]) == LOG_HASH_START
