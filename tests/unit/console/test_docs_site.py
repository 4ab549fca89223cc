"""console.docs_site: the CSP hashes of a docs page's inline scripts, and the nav's pages."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from console.docs_site import inline_script_hashes, nav_pages, policy_with_scripts

ROOT = Path(__file__).resolve().parents[3]
# script bodies a page could hold: anything but the end tag
bodies = st.text(min_size=1, max_size=200).filter(lambda s: "</script" not in s.lower())


def sha256_source(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


@given(
    st.lists(bodies, min_size=1, max_size=5), st.text(max_size=50).filter(lambda s: "<" not in s)
)
def test_every_inline_script_is_hashed_once_in_order(scripts: list[str], between: str) -> None:
    html = between.join(f"<script>{body}</script>" for body in scripts)
    expected = list(dict.fromkeys(sha256_source(body) for body in scripts))
    assert inline_script_hashes(html) == expected


@given(bodies)
def test_scripts_that_do_not_run_inline_are_not_hashed(body: str) -> None:
    html = (
        f'<script src="bundle.js">{body}</script>'
        f'<script id="__config" type="application/json">{body}</script>'
    )
    assert inline_script_hashes(html) == []
    assert inline_script_hashes(f'<script type="module">{body}</script>') == [sha256_source(body)]


def test_a_known_script_has_its_known_hash() -> None:
    # echo -n 'alert(1)' | openssl dgst -sha256 -binary | base64
    assert inline_script_hashes("<script>alert(1)</script>") == [
        "'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"
    ]


@given(st.lists(st.from_regex(r"'sha256-[A-Za-z0-9+/]{43}='", fullmatch=True), max_size=4))
def test_hashes_join_script_src_and_nothing_else(hashes: list[str]) -> None:
    policy = "default-src 'self'; script-src 'self'; style-src 'self'"
    changed = policy_with_scripts(policy, hashes)
    directives = changed.split("; ")
    assert directives[0] == "default-src 'self'" and directives[2] == "style-src 'self'"
    assert directives[1] == " ".join(["script-src 'self'", *hashes])


def test_a_policy_without_script_src_is_refused() -> None:
    with pytest.raises(ValueError):
        policy_with_scripts("default-src 'self'", ["'sha256-x'"])


def test_the_nav_of_mkdocs_yml_names_every_page_in_order() -> None:
    pages = nav_pages((ROOT / "mkdocs.yml").read_text())
    assert pages[0] == ("Home", "index.md")
    assert ("Decisions D1–D8", "decisions.md") in pages
    assert {page for _, page in pages} == {p.name for p in (ROOT / "docs").glob("*.md")}
