"""Which files to import and when (pure: the file system and a clock, no Django).

`transcript_paths` expands the operator's paths (files, or folders searched recursively for
`*.jsonl`) and refuses what must not be read (symlinks out of the folder, FIFOs, devices);
`Watch` decides, on each poll, which files changed and whether a file has been quiet
long enough for its open response to count as complete.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO


@dataclass
class Found:
    """The files to import, and the paths refused with the reason (never their content)."""

    files: list[Path] = field(default_factory=list)
    refused: list[tuple[Path, str]] = field(default_factory=list)


def transcript_paths(paths: Iterable[str]) -> Found:
    """Files as given, and every `*.jsonl` under a folder, sorted (parents before their
    `subagents/` folders, so a child finds its parent session).

    Inside a folder, a symlink (to a file or a folder) that resolves outside it is refused, one
    inside it is read at its real path; folders are never followed through a symlink. Anything
    but a regular file (a FIFO, a device) is refused: reading it could block or never end.
    """
    found = Found()
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            files.extend(_folder(path, found))
        elif path.exists():
            reason = _not_regular(path)
            if reason:
                found.refused.append((path, reason))
            else:
                files.append(path)
    # one file reached twice (as itself and through a symlink inside the folder) is read once
    unique = {p.resolve(): p for p in reversed(files)}
    found.files = sorted(unique.values(), key=lambda p: (p.parent.name == "subagents", str(p)))
    return found


def _folder(folder: Path, found: Found) -> list[Path]:
    root = folder.resolve()
    files: list[Path] = []
    for top, dirs, names in os.walk(folder, followlinks=False):
        here = Path(top)
        for name in sorted(dirs):
            child = here / name
            if child.is_symlink() and not _inside(child.resolve(), root):
                found.refused.append((child, f"a symlink to a folder outside {folder}"))
        for name in sorted(names):
            path = here / name
            if not name.endswith(".jsonl"):
                continue
            if path.is_symlink():
                target = path.resolve()
                if not _inside(target, root):
                    found.refused.append((path, f"a symlink to a file outside {folder}"))
                    continue
                path = target
            reason = _not_regular(path)
            if reason:
                found.refused.append((path, reason))
            else:
                files.append(path)
    return files


def _inside(target: Path, root: Path) -> bool:
    return target == root or root in target.parents


def _not_regular(path: Path) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return "" if stat.S_ISREG(mode) else "not a regular file (a FIFO, a device or a socket)"


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading, refusing (OSError) anything but a regular file at open time:
    a file swapped for a FIFO after the scan must not block the importer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass
class _Seen:
    signature: tuple[int, int, int]
    changed_at: float
    final: bool


@dataclass
class Watch:
    """Poll state of `--follow`: a file is imported when its size, mtime or inode changed or it
    has bytes left from its last pass, and once more, `final`, after it has been quiet for
    `quiet_seconds` with nothing left to read."""

    quiet_seconds: float
    seen: dict[str, _Seen] = field(default_factory=dict)
    backlog: set[str] = field(default_factory=set)  # stopped at their budget: more to read

    def more(self, path: Path, more: bool) -> None:
        """Record whether the import of `path` stopped with bytes left to read."""
        if more:
            self.backlog.add(str(path))
        else:
            self.backlog.discard(str(path))

    def due(self, path: Path, now: float) -> tuple[bool, bool] | None:
        """(import now?, final?) for `path`, or None when it is gone."""
        try:
            stat = path.stat()
        except OSError:
            self.seen.pop(str(path), None)
            self.backlog.discard(str(path))
            return None
        signature = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        previous = self.seen.get(str(path))
        if previous is None or previous.signature != signature:
            self.seen[str(path)] = _Seen(signature, now, False)
            return True, False
        if str(path) in self.backlog:
            # read on at the next pass; final only once it reached the end and went quiet
            return True, False
        if not previous.final and now - previous.changed_at >= self.quiet_seconds:
            previous.final = True
            return True, True
        return False, False
