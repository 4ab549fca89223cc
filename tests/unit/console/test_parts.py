"""A part holding another part (the surface and its turn picker, `console.parts`): the inner
part's changes change its own key only, and it has the same key alone as inside."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from console.parts import DIGEST_MARK, inner_mark, keyed

OOB = ' hx-swap-oob="true"'
# Text as a template renders it, escaped: no markup and no quote of its own (so never the
# out-of-band attribute), no lone surrogates, and no key mark (no "_")
text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters='<>"_'), max_size=40)


def picker(body: str, oob: bool = False) -> str:
    return (
        f'<div id="surface-picker"{OOB if oob else ""}><!--part:surface_picker-->'
        f'<input class="part-key" value="{inner_mark("surface_picker")}">{body}'
        "<!--/part:surface_picker--></div>"
    )


def surface(messages: str, picker_body: str, oob: bool = False) -> str:
    return (
        f'<section id="surface"{OOB if oob else ""}><input class="part-key" value="{DIGEST_MARK}">'
        f"<h2>Surface</h2>{picker(picker_body)}<ol>{messages}</ol></section>"
    )


@given(messages=text, before=text, after=text)
def test_the_picker_changes_its_own_key_not_the_surfaces(
    messages: str, before: str, after: str
) -> None:
    html_before, surface_before = keyed("surface", surface(messages, before))
    html_after, surface_after = keyed("surface", surface(messages, after, oob=True))
    assert surface_before == surface_after
    alone_before = keyed("surface_picker", picker(before, oob=True))[1]
    alone_after = keyed("surface_picker", picker(after))[1]
    # the picker's key, inside the surface, is the one it has alone
    assert f'value="{alone_before}"' in html_before
    assert f'value="{alone_after}"' in html_after
    assert (alone_before == alone_after) == (before == after)
    assert f'value="{surface_before}"' in html_before
    assert DIGEST_MARK not in html_before and inner_mark("surface_picker") not in html_before


@given(before=text, after=text, body=text)
def test_the_surfaces_messages_change_its_key(before: str, after: str, body: str) -> None:
    first = keyed("surface", surface(before, body))[1]
    second = keyed("surface", surface(after, body))[1]
    assert (first == second) == (before == after)


def test_a_part_without_fences_is_digested_whole() -> None:
    one = keyed("turns", f'<div id="turns" value="{DIGEST_MARK}">1</div>')
    two = keyed("turns", f'<div id="turns"{OOB} value="{DIGEST_MARK}">1</div>')
    assert one[1] == two[1] and one[1].startswith("turns:")
    assert keyed("turns", f'<div id="turns" value="{DIGEST_MARK}">2</div>')[1] != one[1]


def test_a_clients_text_naming_the_mark_is_shown_as_it_is() -> None:
    """A transcript may say anything, the marks included; escaped, it is never a mark."""
    said = 'the key goes in value="__part-digest__" or __part-digest:surface_picker__'
    escaped = said.replace('"', "&quot;")
    html, key = keyed("turns", f'<div id="turns"><input value="{DIGEST_MARK}">{escaped}</div>')
    assert escaped in html and f'value="{key}"' in html


def _keyed_through_the_fences(name: str, html: str) -> tuple[str, str]:
    """`keyed` as it is defined: every fence found by the regex, whatever the text holds (the
    part without fences skips these passes)."""
    from console import parts

    def inner(match: Any) -> str:
        return (
            match.group(0) if match.group(1) == name else keyed(match.group(1), match.group(0))[0]
        )

    html = parts._FENCED.sub(inner, html)
    own = [m.group(0) for m in parts._FENCED.finditer(html) if m.group(1) == name]
    digested = "".join(own) if own else html
    plain = parts._FENCED.sub(lambda m: m.group(0) if m.group(1) == name else "", digested)
    marks = (f'value="{DIGEST_MARK}"', f'value="{inner_mark(name)}"')
    for mark in marks:
        plain = plain.replace(mark, "")
    plain = plain.replace(OOB, "")
    key = f"{name}:{hashlib.sha256(plain.encode('utf-8')).hexdigest()[:20]}"
    for mark in marks:
        html = html.replace(mark, f'value="{key}"')
    return html, key


# markup near the fences' own: fence-like comments that are not fences, marks, the attribute
near_fences = st.lists(
    st.sampled_from(
        [
            "<!--part",
            "<!--part:",
            "<!--/part:charts-->",
            "<!-- part:charts-->",
            f'value="{DIGEST_MARK}"',
            f'value="{inner_mark("charts")}"',
            OOB,
            "<p>",
            "</p>",
        ]
    )
    | text,
    max_size=8,
).map("".join)


@given(body=near_fences)
def test_a_part_without_a_fence_is_keyed_as_through_the_fences(body: str) -> None:
    html = f'<section id="charts"><input value="{DIGEST_MARK}">{body}</section>'
    assert keyed("charts", html) == _keyed_through_the_fences("charts", html)


@given(messages=text, body=text)
def test_a_part_with_fences_is_keyed_as_through_the_fences(messages: str, body: str) -> None:
    html = surface(messages, body)
    assert keyed("surface", html) == _keyed_through_the_fences("surface", html)
