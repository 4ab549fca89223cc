"""The documentation site the console serves at /docs/: pure helpers, standard library only.

The site is MkDocs' build of docs/ (`make docs` writes it to site/). Its pages carry a few
inline scripts (Material's theme settings), which the console's Content-Security-Policy refuses
(`script-src 'self'`); each page is served with that policy plus the SHA-256 of exactly the
inline scripts it contains, so nothing else inline can run.
"""

from __future__ import annotations

import base64
import hashlib
import re

_SCRIPT = re.compile(r"<script(\s[^>]*)?>(.*?)</script\s*>", re.IGNORECASE | re.DOTALL)
_TYPE = re.compile(r"""\btype\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)
_SRC = re.compile(r"\bsrc\s*=", re.IGNORECASE)
_RUNNABLE_TYPES = {"text/javascript", "application/javascript", "module"}
# `- Title: page.md` lines of mkdocs.yml's nav, in order (sections are lines without a page).
_NAV_PAGE = re.compile(r"^\s*-\s+(?P<title>[^:\n]+):\s+(?P<page>[\w./-]+\.md)\s*$", re.MULTILINE)


def inline_script_hashes(html: str) -> list[str]:
    """CSP source expressions (`'sha256-…'`) of every inline script a browser would run.

    Scripts with a `src` are covered by `'self'`; data blocks (`type="application/json"`) do
    not run. Each distinct script appears once, in document order.
    """
    hashes: list[str] = []
    for match in _SCRIPT.finditer(html):
        attributes = match.group(1) or ""
        if _SRC.search(attributes):
            continue
        kind = _TYPE.search(attributes)
        if kind is not None and kind.group(1).lower() not in _RUNNABLE_TYPES:
            continue
        digest = hashlib.sha256(match.group(2).encode("utf-8")).digest()
        source = f"'sha256-{base64.b64encode(digest).decode('ascii')}'"
        if source not in hashes:
            hashes.append(source)
    return hashes


def policy_with_scripts(policy: str, hashes: list[str]) -> str:
    """`policy` with `hashes` added to its `script-src` directive (unchanged when none)."""
    if not hashes:
        return policy
    directives = [part.strip() for part in policy.split(";")]
    for index, directive in enumerate(directives):
        if directive.split(" ", 1)[0] == "script-src":
            directives[index] = " ".join([directive, *hashes])
            return "; ".join(directives)
    raise ValueError("the policy has no script-src directive")


def nav_pages(mkdocs_yml: str) -> list[tuple[str, str]]:
    """(title, page) of every page in mkdocs.yml's nav, in order."""
    return [(m["title"].strip(), m["page"]) for m in _NAV_PAGE.finditer(mkdocs_yml)]
