"""The record schema's quick NUL check answers as the full walk that names the field (its
oracle), for any JSON value: no database needed, Django's settings are (the schema imports
ninja)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from telemetry.schemas import _no_nul_anywhere, _refuse_nul, nul_free

_text = st.lists(st.sampled_from(["a", "\x00", "é", ".", "0"])).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=20,
)


def _outcome(check, value) -> str | None:
    try:
        check(value)
    except ValueError as exc:
        return str(exc)
    return None


@given(_json)
def test_the_quick_nul_check_refuses_as_the_full_walk(value):
    assert _outcome(_no_nul_anywhere, value) == _outcome(_refuse_nul, value)
    if nul_free(value):
        assert _outcome(_refuse_nul, value) is None
