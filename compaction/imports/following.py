"""Which files to import and when (pure: the file system and a clock, no Django).

`transcript_paths` expands the operator's paths (files, or folders searched recursively for
`*.jsonl`); `Watch` decides, on each poll, which files changed and whether a file has been quiet
long enough for its open response to count as complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path


def transcript_paths(paths: Iterable[str]) -> list[Path]:
    """Files as given, and every `*.jsonl` under a folder, sorted (parents before their
    `subagents/` folders, so a child finds its parent session)."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.jsonl") if p.is_file()))
        elif path.is_file():
            found.append(path)
    return sorted(dict.fromkeys(found), key=lambda p: (p.parent.name == "subagents", str(p)))


@dataclass
class _Seen:
    signature: tuple[int, int, int]
    changed_at: float
    final: bool


@dataclass
class Watch:
    """Poll state of `--follow`: a file is imported when its size, mtime or inode changed, and
    once more, `final`, after it has been quiet for `quiet_seconds`."""

    quiet_seconds: float
    seen: dict[str, _Seen] = field(default_factory=dict)

    def due(self, path: Path, now: float) -> tuple[bool, bool] | None:
        """(import now?, final?) for `path`, or None when it is gone."""
        try:
            stat = path.stat()
        except OSError:
            self.seen.pop(str(path), None)
            return None
        signature = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        previous = self.seen.get(str(path))
        if previous is None or previous.signature != signature:
            self.seen[str(path)] = _Seen(signature, now, False)
            return True, False
        if not previous.final and now - previous.changed_at >= self.quiet_seconds:
            previous.final = True
            return True, True
        return False, False
