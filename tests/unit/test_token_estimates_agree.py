"""chars/4 is defined once (D6): telemetry's projection uses the pure core's rule, not a copy."""

from context_core import tokens as core_tokens
from telemetry import pressure


def test_telemetry_uses_the_cores_one_chars_per_token_rule():
    assert pressure.estimate_tokens is core_tokens.estimate_tokens
    assert pressure.CHARS_PER_TOKEN == core_tokens.CHARS_PER_TOKEN == 4
