"""How an audited change reads (console.presenters.audit): pure, no Django."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from console.presenters.audit import (
    EMPTY_SHOWN,
    HIDDEN,
    NONE_SHOWN,
    SHOWN_CHARS,
    FieldChange,
    actor_label,
    api_actor,
    field_changes,
    shown,
)


def test_each_field_reads_before_and_after_in_name_order() -> None:
    rows = field_changes({"keep_rounds": [4, 6], "cache_ttl": ["1h", "5m"], "note": [None, ""]})
    assert rows == [
        FieldChange("cache ttl", "1h", "5m"),
        FieldChange("keep rounds", "4", "6"),
    ]


def test_values_read_as_people_read_them() -> None:
    assert shown(None) == shown("None") == NONE_SHOWN
    assert shown("") == EMPTY_SHOWN
    assert shown(True) == "yes" and shown(False) == "no"
    assert shown(["read", "grep"]) == '["read", "grep"]'
    assert shown({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    assert shown(HIDDEN) == HIDDEN


def test_a_cleared_field_still_reads_as_a_change() -> None:
    assert field_changes({"name": ["bot", ""]}) == [FieldChange("name", "bot", EMPTY_SHOWN)]


def test_many_to_many_changes_read_as_added_or_removed() -> None:
    added = {"groups": {"type": "m2m", "operation": "add", "objects": ["viewer", "admin"]}}
    removed = {"groups": {"type": "m2m", "operation": "delete", "objects": ["viewer"]}}
    assert field_changes(added) == [FieldChange("groups", NONE_SHOWN, "added viewer, admin")]
    assert field_changes(removed) == [FieldChange("groups", "removed viewer", NONE_SHOWN)]


def test_who_made_a_change() -> None:
    assert actor_label("alice", None) == "alice"
    assert actor_label("alice", {"actor": api_actor("abc123")}) == "alice"
    assert actor_label(None, {"actor": api_actor("abc123")}) == "api:abc123"
    assert actor_label(None, None) == "system"
    assert actor_label("", {"other": 1}) == "system"


@given(st.text(min_size=SHOWN_CHARS + 1, max_size=SHOWN_CHARS * 3))
def test_long_values_are_cut_to_the_shown_length(text: str) -> None:
    result = shown(text)
    assert len(result) == SHOWN_CHARS and result.endswith("…")
    assert text.startswith(result[:-1])


@given(st.one_of(st.none(), st.integers(), st.text(max_size=50), st.booleans()))
def test_a_change_never_reads_as_no_change_unless_both_are_blank(value: object) -> None:
    rows = field_changes({"field": [value, "other-value"]})
    assert len(rows) == 1 and rows[0].after == "other-value"
