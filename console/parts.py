"""The session page's parts, keyed by what they show: a part's key is its name and a digest of
its HTML, so the live poll can leave out every part the browser already shows (issue 39).

Pure: no Django. A rendered part carries `DIGEST_MARK` where its key goes (a hidden input the
poller sends back as `have`); `keyed` puts the key in its place."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

DIGEST_MARK = "__part-digest__"
_OOB = ' hx-swap-oob="true"'


def keyed(name: str, html: str) -> tuple[str, str]:
    """The part with its key in place of `DIGEST_MARK`, and that key ("name:digest"). The digest
    ignores the mark and the out-of-band attribute, so the part drawn in the page and the same
    part sent out of band by the poll have the same key."""
    plain = html.replace(DIGEST_MARK, "").replace(_OOB, "")
    key = f"{name}:{hashlib.sha256(plain.encode('utf-8')).hexdigest()[:20]}"
    return html.replace(DIGEST_MARK, key), key


def held(values: Iterable[str]) -> frozenset[str]:
    """The part keys a poll says the browser holds (its `have` values), well-formed ones only."""
    return frozenset(v for v in values if 0 < len(v) <= 80 and v.count(":") == 1)
