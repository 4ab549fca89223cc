"""Surface fingerprints (D1): stable per message, named like an agent's `prefix` report."""

from __future__ import annotations

from context_core import derive_surface, parse_anthropic, surface_fingerprints


def test_fingerprints_name_the_system_then_each_message_and_change_only_where_the_text_does():
    log = parse_anthropic(
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
        ],
        system="You are careful.",
    )
    prints = surface_fingerprints(derive_surface(log), with_text=True)
    assert [p.name for p in prints] == ["system", "message 0", "message 1"]
    assert prints[0].text == "You are careful." and prints[1].tokens == len("hello") // 4
    again = surface_fingerprints(derive_surface(log))
    assert [p.hash for p in again] == [p.hash for p in prints] and again[0].text is None
    changed = parse_anthropic(
        [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi!"}],
        system="You are careful.",
    )
    other = surface_fingerprints(derive_surface(changed))
    assert [a.hash == b.hash for a, b in zip(prints, other, strict=True)] == [True, True, False]
