"""Session metadata and titles: what each door says about a session, merged under one rule.

Pure (no Django): the parsers, OTLP mapping and the JSON records hand their facts to
`from_*`, `merge` combines them with what the session already holds, and `columns` gives the
indexed columns the sessions list filters on (`telemetry.session_state.record_metadata` stores).

Canonical keys: `title` (what the agent or its user named the session), `first_prompt` (the
first user prompt, trimmed), `user`, `repository`, `cwd`, `branch`, `commit`, `agent`,
`agent_version`, `entrypoint`, `originator`; a client or JSON record may add keys of its own.

The merge rule, per key: the first writer wins, unless the door is more specific
(`DOORS`: OTLP attributes < a transcript import < metadata the caller sent explicitly). A
`title` from the same door or a more specific one replaces the stored one (a rename).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, Literal

Door = Literal["otlp", "import", "record"]
# How specific each door is: a higher rank replaces a key a lower one wrote.
DOORS: Final[dict[str, int]] = {"otlp": 1, "import": 2, "record": 3}

TITLE_CHARS: Final = 80
MAX_KEYS: Final = 50
MAX_KEY_CHARS: Final = 64
MAX_VALUE_CHARS: Final = 500
COLUMN_CHARS: Final = 200
_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_SPACE = re.compile(r"\s+")
# Claude Code wraps slash commands and local output in tags; they are not what a person typed.
_TAGS = re.compile(r"</?[a-z-]+>")


def trim_title(text: str, limit: int = TITLE_CHARS) -> str:
    """One line of at most `limit` characters: whitespace collapsed, cut with an ellipsis."""
    line = _SPACE.sub(" ", _TAGS.sub(" ", text)).strip()
    if len(line) <= limit:
        return line
    return line[: limit - 1].rstrip() + "…"


def _text(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return ""
    if isinstance(value, (str, int, float)):
        return str(value).strip()[:MAX_VALUE_CHARS]
    return ""


def _pick(pairs: Mapping[str, Any]) -> dict[str, str]:
    return {key: text for key, value in pairs.items() if (text := _text(value))}


def from_claude_code_line(obj: Mapping[str, Any]) -> dict[str, str]:
    """A Claude Code transcript line's metadata: `cwd`, `gitBranch`, `version`, `entrypoint` of
    any message line; the title of a `summary` or `custom-title` line."""
    kind = obj.get("type")
    if kind == "summary":
        return _pick({"title": trim_title(_text(obj.get("summary")))})
    if kind == "custom-title":
        return _pick({"title": trim_title(_text(obj.get("customTitle") or obj.get("title")))})
    found = _pick(
        {
            "cwd": obj.get("cwd"),
            "branch": obj.get("gitBranch"),
            "agent_version": obj.get("version"),
            "entrypoint": obj.get("entrypoint"),
        }
    )
    if found:
        found["agent"] = "claude-code"
    return found


def from_codex_meta(payload: Mapping[str, Any]) -> dict[str, str]:
    """A Codex rollout's `session_meta` payload: cwd, cli_version, originator and `git`."""
    git = payload.get("git")
    git = git if isinstance(git, Mapping) else {}
    found = _pick(
        {
            "cwd": payload.get("cwd"),
            "agent_version": payload.get("cli_version"),
            "originator": payload.get("originator"),
            "branch": git.get("branch"),
            "repository": git.get("repository_url"),
            "commit": git.get("commit_hash"),
        }
    )
    found["agent"] = "codex"
    return found


def first_prompt(text: str) -> dict[str, str]:
    """The `first_prompt` key of a session whose first user prompt is `text`."""
    return _pick({"first_prompt": trim_title(text)})


# OTLP attribute names (resource or span) for each key, the first present wins.
OTLP_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "user": ("user.id", "enduser.id", "user.email", "user.name"),
    "agent": ("service.name",),
    "agent_version": ("service.version",),
    "repository": ("vcs.repository.url.full", "vcs.repository.name"),
    "branch": ("vcs.ref.head.name",),
    "commit": ("vcs.ref.head.revision",),
    "cwd": ("process.working_directory",),
}


# Every attribute name `from_otlp` reads: an item carrying none of them says only what its
# resource says (`telemetry.otlp.mapping` reads a resource's metadata once for all its items).
OTLP_NAMES: Final = frozenset(name for names in OTLP_KEYS.values() for name in names)


def from_otlp(resource: Mapping[str, Any], attributes: Mapping[str, Any]) -> dict[str, str]:
    """Metadata from a span's or log record's attributes, then its resource's."""
    found: dict[str, str] = {}
    for key, names in OTLP_KEYS.items():
        for name in names:
            text = _text(attributes.get(name)) or _text(resource.get(name))
            if text:
                found[key] = text
                break
    return found


def metadata_problem(value: Mapping[str, Any]) -> str | None:
    """Why `value` cannot be a record's or client's `metadata` object, or None."""
    if len(value) > MAX_KEYS:
        return f"must have at most {MAX_KEYS} keys"
    for key, item in value.items():
        if not _KEY.match(key):
            return f"key {key[:MAX_KEY_CHARS]!r} must be 1-64 letters, digits, '_', '.' or '-'"
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            return f"{key}: must be a string or a number"
        if isinstance(item, str) and len(item) > MAX_VALUE_CHARS:
            return f"{key}: must be at most {MAX_VALUE_CHARS} characters"
    return None


def from_record(value: Mapping[str, Any]) -> dict[str, str]:
    """A record's or client's `metadata` (checked by `metadata_problem`), titles trimmed."""
    found = _pick(value)
    for key in ("title", "first_prompt"):
        if key in found:
            found[key] = trim_title(found[key])
    return found


def merge(
    values: Mapping[str, str],
    doors: Mapping[str, str],
    incoming: Mapping[str, str],
    door: Door,
) -> tuple[dict[str, str], dict[str, str]] | None:
    """`values` and `doors` with `incoming` from `door` merged in; None when nothing changes.

    Per key the first writer wins unless `door` is more specific than the key's door; a
    `title` from the same door or a more specific one replaces the stored title.
    """
    rank = DOORS[door]
    out, out_doors = dict(values), dict(doors)
    changed = False
    for key, value in incoming.items():
        held = DOORS.get(out_doors.get(key, ""), 0)
        if not value or (out.get(key) == value and rank <= held):
            continue
        if key not in out or rank > held or (key == "title" and rank >= held):
            out[key] = value
            out_doors[key] = door
            changed = True
    return (out, out_doors) if changed else None


def columns(values: Mapping[str, str]) -> dict[str, str]:
    """The session's indexed columns from its merged metadata."""

    def cut(text: str) -> str:
        return text[:COLUMN_CHARS]

    return {
        "title": trim_title(values.get("title") or values.get("first_prompt") or ""),
        "meta_user": cut(values.get("user", "")),
        "repository": cut(values.get("repository") or values.get("cwd") or ""),
        "git_branch": cut(values.get("branch", "")),
        "agent_name": cut(values.get("agent", "")),
        "agent_version": cut(values.get("agent_version", "")),
    }
