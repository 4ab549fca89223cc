"""Bounding (D3) and token estimates (D6)."""

from __future__ import annotations

from typing import Any

import pytest

from context_core import (
    OMISSION_MARKER,
    BoundSpec,
    Calibration,
    ToolResult,
    bound_text,
    derive_surface,
    estimate_tokens,
    parse_openai,
)


def test_bound_text_pins_head_marker_and_tail():
    text = "0123456789" * 10
    bounded = bound_text(text, 50)
    assert bounded == "01234567890\n[... 79 chars omitted ...]\n0123456789"
    assert len(bounded) == 49  # the count has one digit fewer than the widest it could need
    assert OMISSION_MARKER.format(omitted=79) in bounded


def test_bound_text_degrades_sanely_for_tiny_caps():
    assert bound_text("abcdef", 3) == "a\u2026f"
    assert bound_text("abcdef", 2) == "af"
    assert bound_text("ab", 2) == "ab"
    with pytest.raises(ValueError, match="at least 2"):
        bound_text("abc", 1)


def test_estimate_tokens_is_chars_over_four():
    assert [estimate_tokens(c) for c in (0, 3, 4, 401, -5)] == [0, 0, 1, 100, 0]


def test_calibration_recovers_an_affine_fit():
    points = [(chars, round(1.1 * chars / 4 + 3000)) for chars in range(10_000, 200_000, 20_000)]
    fit = Calibration.fit(points)
    assert fit.fitted
    assert fit.slope == pytest.approx(1.1, rel=1e-3)
    assert fit.overhead == pytest.approx(3000, abs=2)
    assert fit.estimate(40_000) == pytest.approx(14_000, abs=2)
    assert fit.delta(4_000) == 1_100


def test_calibration_falls_back_without_enough_or_sane_points():
    assert not Calibration.fit([(1000, 300)] * 3).fitted
    same = Calibration.fit([(1000, 300)] * 6)
    assert not same.fitted and "same size" in same.reason
    wild = Calibration.fit([(c, c * 5) for c in range(1000, 7000, 1000)])
    assert not wild.fitted and "slope" in wild.reason
    assert wild.estimate(4_001) == 1_000


def test_each_message_is_bounded_by_the_cap_in_force_when_it_was_appended():
    call: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        ],
    }
    old = parse_openai(
        [call, {"role": "tool", "tool_call_id": "a", "content": "x" * 500}], bound=BoundSpec(100)
    )
    call_b = {**call, "tool_calls": [{**call["tool_calls"][0], "id": "b"}]}
    new = parse_openai(
        [call_b, {"role": "tool", "tool_call_id": "b", "content": "y" * 500}],
        preceding=old,
        bound=BoundSpec(300),
    )
    surface = derive_surface([*old, *new])
    sizes = [
        block.text_chars
        for m in surface.messages
        if m.role == "tool"
        for block in m.blocks
        if isinstance(block, ToolResult)
    ]
    assert sizes == [100, 300] or (sizes[0] <= 100 and 200 < sizes[1] <= 300)
    assert BoundSpec.from_dict(BoundSpec(300).to_dict()) == BoundSpec(300)
