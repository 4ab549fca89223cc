"""The session page's parts, keyed by what they show: a part's key is its name and a digest of
its HTML, so the live poll can leave out every part the browser already shows (issue 39).

Pure: no Django. A rendered part carries `DIGEST_MARK` where its key goes, as a hidden input's
quoted value (`value="__part-digest__"`, which the poller sends back as `have`); `keyed` puts
the key in its place. Only the quoted attribute is replaced: a client's text on the page is
escaped (its `"` is `&quot;`), so a transcript that says `__part-digest__` is shown as it is.

A part may hold another part that changes more often than it does (the surface holds its turn
picker, whose bounds follow every new turn): the inner part is fenced, `<!--part:NAME-->` …
`<!--/part:NAME-->`, and carries `inner_mark(NAME)` where its own key goes. The outer part's
digest leaves the fenced HTML out, so a new turn changes the picker's key, not the surface's,
and the poll sends the picker alone. A part's digest covers what its own fences hold, or all of
its HTML when it has none: the picker rendered alone and inside the surface has the same key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

DIGEST_MARK = "__part-digest__"
_OOB = ' hx-swap-oob="true"'
_FENCED = re.compile(r"<!--part:(\w+)-->.*?<!--/part:\1-->", re.S)
_FENCE_OPEN = "<!--part:"  # what every match of `_FENCED` starts with


def _value(mark: str) -> str:
    """A mark as the hidden input's quoted value: the only form `keyed` replaces."""
    return f'value="{mark}"'


def inner_mark(name: str) -> str:
    """Where an inner part's key goes (its hidden input's value)."""
    return f"__part-digest:{name}__"


def keyed(name: str, html: str) -> tuple[str, str]:
    """The part with its key in place of `DIGEST_MARK` (and of its own `inner_mark`), every
    fenced inner part keyed on its own, and the part's key ("name:digest"). The digest ignores
    the marks and the out-of-band attribute, so the part drawn in the page and the same part
    sent out of band by the poll have the same key."""

    def inner(match: re.Match[str]) -> str:
        return (
            match.group(0) if match.group(1) == name else keyed(match.group(1), match.group(0))[0]
        )

    if _FENCE_OPEN in html:
        html = _FENCED.sub(inner, html)
        own = [m.group(0) for m in _FENCED.finditer(html) if m.group(1) == name]
        digested = "".join(own) if own else html
        plain = _FENCED.sub(lambda m: m.group(0) if m.group(1) == name else "", digested)
    else:  # no fence (most parts, the overview's charts among them): no pass of the regex
        plain = html
    own_marks = (_value(DIGEST_MARK), _value(inner_mark(name)))
    for mark in own_marks:
        plain = plain.replace(mark, "")
    plain = plain.replace(_OOB, "")
    key = f"{name}:{hashlib.sha256(plain.encode('utf-8')).hexdigest()[:20]}"
    for mark in own_marks:
        html = html.replace(mark, _value(key))
    return html, key


def held(values: Iterable[str]) -> frozenset[str]:
    """The part keys a poll says the browser holds (its `have` values), well-formed ones only."""
    return frozenset(v for v in values if 0 < len(v) <= 80 and v.count(":") == 1)
