"""chars/4 is defined twice on purpose: telemetry (the projection, D6) must not import
compaction, and core/src/context_core must stay standard-library only. This test holds them equal."""

from hypothesis import given
from hypothesis import strategies as st

from context_core import tokens as core_tokens
from telemetry import pressure


def test_both_estimators_use_the_same_characters_per_token():
    assert pressure.CHARS_PER_TOKEN == core_tokens.CHARS_PER_TOKEN == 4


@given(st.integers(min_value=0, max_value=10**12))
def test_both_estimators_agree_on_every_count(chars):
    assert pressure.estimate_tokens(chars) == core_tokens.estimate_tokens(chars)
