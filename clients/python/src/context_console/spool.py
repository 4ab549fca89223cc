"""A bounded on-disk spool for telemetry records the console did not take.

Layout: one directory per console and key (`<host>[_<port>]-<key fingerprint>`, never the key
itself), one file per spooled batch, named `<stamp ns>-<writer>-<seq>-<records>.jsonl`, so that
sorting the names sorts the batches by the time they were spooled (a writer's stamps never go
back, whatever its clock does). A file holds one JSON record per line.

Durability: a batch is written to a temporary file, fsynced, and renamed into place (then the
directory is fsynced), so a file under its final name was complete when it got there. Reading
still tolerates damage: a line that does not parse (a torn tail) is skipped and counted, never
fatal.

Several processes may share a directory. Writing needs no lock (each writer's names are its
own); reading, removing and expiring happen only under an exclusive lock on `.lock`, taken
without waiting, so two processes never send the same file at once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 7 * 24 * 3600.0
ENV_DIR = "CONTEXT_CONSOLE_SPOOL_DIR"
ENV_MAX_BYTES = "CONTEXT_CONSOLE_SPOOL_MAX_BYTES"
ENV_MAX_AGE = "CONTEXT_CONSOLE_SPOOL_MAX_AGE"
# A temporary file this old belongs to a writer that died between creating and renaming it:
# its batch was never counted as spooled, so removing it loses nothing that was promised.
STALE_TEMP_SECONDS = 3600.0

_NAME = re.compile(r"^(\d{20})-([0-9a-f]{8})-(\d{10})-(\d+)\.jsonl$")
_TEMP_PREFIX = ".tmp-"
_LOCK = ".lock"


@dataclass(frozen=True)
class SpoolSettings:
    directory: Path
    max_bytes: int
    max_age_seconds: float


@dataclass(frozen=True)
class SpoolFile:
    """One spooled batch as its name and size describe it."""

    name: str
    stamp_ns: int
    records: int
    size: int


@dataclass(frozen=True)
class Chunk:
    """The oldest batches, read: their records in order, and how many of the records their names
    promise could not be read (a torn tail, damage)."""

    files: tuple[SpoolFile, ...]
    records: list[dict[str, Any]]
    unreadable: int


def key_fingerprint(key: str) -> str:
    """16 hex digits of the key's SHA-256: tells keys apart in a path without revealing one."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def directory_name(url: str, key: str) -> str:
    """`<host>[_<port>]-<key fingerprint>`: one spool per console and key, safe as a path
    segment on any filesystem (every character outside [A-Za-z0-9.-] becomes `_`)."""
    parts = urlsplit(url)
    host = parts.hostname or "console"
    place = host if parts.port is None else f"{host}_{parts.port}"
    return re.sub(r"[^A-Za-z0-9.-]", "_", place) + "-" + key_fingerprint(key)


def default_root() -> Path:
    """The user's cache directory, `context-console/spool` inside it."""
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Caches")
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "context-console" / "spool"


def _env_number(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}: {raw!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}: {raw!r} must be a finite number >= 0")
    return value


def spool_settings(
    *,
    url: str,
    key: str,
    root: str | os.PathLike[str] | None,
    max_bytes: int | None,
    max_age_seconds: float | None,
    environ: Mapping[str, str],
) -> SpoolSettings:
    """The spool's place and limits: each argument given wins, then its environment variable
    (`CONTEXT_CONSOLE_SPOOL_DIR`, `..._MAX_BYTES`, `..._MAX_AGE` in seconds), then the default
    (the user's cache directory, 64 MiB, 7 days). The directory is always the root's
    subdirectory for this console and key. Raises ValueError naming a variable that is not a
    number >= 0."""
    env_bytes = _env_number(environ, ENV_MAX_BYTES)
    env_age = _env_number(environ, ENV_MAX_AGE)
    env_root = environ.get(ENV_DIR, "").strip()
    if root is not None:
        chosen_root = Path(root)
    elif env_root:
        chosen_root = Path(env_root).expanduser()
    else:
        chosen_root = default_root()
    if max_bytes is None:
        max_bytes = DEFAULT_MAX_BYTES if env_bytes is None else int(env_bytes)
    if max_age_seconds is None:
        max_age_seconds = DEFAULT_MAX_AGE_SECONDS if env_age is None else env_age
    return SpoolSettings(
        directory=chosen_root / directory_name(url, key),
        max_bytes=max_bytes,
        max_age_seconds=float(max_age_seconds),
    )


def parse_name(name: str, size: int) -> SpoolFile | None:
    """A spool file's description from its name; None for anything else in the directory."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SpoolFile(name=name, stamp_ns=int(match[1]), records=int(match[4]), size=size)


def encode_batch(records: Sequence[Mapping[str, Any]]) -> bytes:
    """One JSON document per line, each line ending in a newline (ASCII: escapes keep lone
    surrogates and line separators inside their line)."""
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode("ascii")


def decode_batch(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The records of a spool file's bytes, in order, and the number of lines that are not a
    JSON object (a torn tail, damage): those are skipped, the rest kept. Never raises."""
    records: list[dict[str, Any]] = []
    unreadable = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            unreadable += 1
    return records, unreadable


def plan_expiry(
    files: Sequence[SpoolFile], *, now_ns: int, max_bytes: int, max_age_seconds: float
) -> tuple[list[SpoolFile], list[SpoolFile]]:
    """Which batches to remove, oldest first: those older than `max_age_seconds` (too old), then
    the oldest of the rest until the survivors fit in `max_bytes` (too big).

    The survivors are always the newest batches of `files` (a suffix in name order); they are
    none older than the age limit and together no larger than `max_bytes`.
    """
    # Names begin with the stamp, so name order is age order.
    ordered = sorted(files, key=lambda f: f.name)
    oldest_kept = now_ns - int(max_age_seconds * 1e9)
    too_old = [f for f in ordered if f.stamp_ns < oldest_kept]
    rest = ordered[len(too_old) :]
    total = sum(f.size for f in rest)
    too_big: list[SpoolFile] = []
    for f in rest:
        if total <= max_bytes:
            break
        too_big.append(f)
        total -= f.size
    return too_old, too_big


if sys.platform == "win32":
    import msvcrt

    def _try_lock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _fsync_directory(directory: Path) -> None:
    if sys.platform == "win32":
        return  # directories cannot be opened for fsync there; NTFS journals the rename
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """One console-and-key spool directory. Thread-safe; every method may raise OSError except
    where it says otherwise (the reporter counts those, it never lets them reach the agent)."""

    def __init__(self, settings: SpoolSettings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.directory = settings.directory
        self._clock = clock
        self._writer = secrets.token_hex(4)
        self._lock = threading.Lock()
        self._seq = 0
        self._last_stamp = 0

    def _files(self) -> list[SpoolFile]:
        found = []
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        for entry in entries:
            try:
                described = parse_name(entry.name, entry.stat().st_size)
            except FileNotFoundError:  # removed since the listing
                continue
            if described is not None:
                found.append(described)
        found.sort(key=lambda f: f.name)
        return found

    def is_empty(self) -> bool:
        """No batch waits (never raises: an unreadable directory holds nothing we can send)."""
        try:
            with os.scandir(self.directory) as entries:
                return not any(_NAME.match(e.name) for e in entries)
        except OSError:
            return True

    def waiting(self) -> int:
        """Records waiting in the spool, this process's and any other's (never raises)."""
        try:
            return sum(f.records for f in self._files())
        except OSError:
            return 0

    def append(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Write one batch durably (temp file, fsync, rename, fsync of the directory)."""
        data = encode_batch(records)
        with self._lock:
            self._seq += 1
            seq = self._seq
            # Never back in time, so this writer's batches sort in the order they were written.
            stamp = max(int(self._clock() * 1e9), self._last_stamp + 1)
            self._last_stamp = stamp
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{stamp:020d}-{self._writer}-{seq:010d}-{len(records)}.jsonl"
        temp = self.directory / f"{_TEMP_PREFIX}{self._writer}-{seq:010d}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        os.close(fd)
        temp.replace(self.directory / name)
        _fsync_directory(self.directory)

    @contextlib.contextmanager
    def claimed(self) -> Iterator[bool]:
        """Hold the directory's lock for the block, if no one else holds it (True), without
        waiting. Reading, removing and expiring batches belong inside a claim."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            yield False
            return
        try:
            try:
                _try_lock(fd)
            except OSError:
                mine = False
            else:
                mine = True
            yield mine
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def expire(self) -> dict[str, int]:
        """Remove what is past the limits, oldest first (`plan_expiry`); the records removed,
        by reason (`spool_age`, `spool_full`). Also removes stale temporary files. In a claim."""
        plan = plan_expiry(
            self._files(),
            now_ns=int(self._clock() * 1e9),
            max_bytes=self.settings.max_bytes,
            max_age_seconds=self.settings.max_age_seconds,
        )
        removed: dict[str, int] = {}
        for reason, files in zip(("spool_age", "spool_full"), plan, strict=True):
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / f.name).unlink()
                    removed[reason] = removed.get(reason, 0) + f.records
        self._remove_stale_temps()
        return removed

    def _remove_stale_temps(self) -> None:
        now = time.time()  # file times are the filesystem's, not the injected clock's
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name.startswith(_TEMP_PREFIX):
                with contextlib.suppress(FileNotFoundError):
                    if now - entry.stat().st_mtime > STALE_TEMP_SECONDS:
                        Path(entry.path).unlink()

    def oldest(self, max_records: int, max_bytes: int = 1024 * 1024) -> Chunk | None:
        """The oldest batches holding at most `max_records` records and `max_bytes` bytes
        together, but at least one batch (each was one request's worth when it was spooled),
        read; None when the spool is empty. In a claim."""
        chosen: list[SpoolFile] = []
        records: list[dict[str, Any]] = []
        unreadable = 0
        for f in self._files():
            if chosen and (
                sum(c.records for c in chosen) + f.records > max_records
                or sum(c.size for c in chosen) + f.size > max_bytes
            ):
                break
            try:
                data = (self.directory / f.name).read_bytes()
            except FileNotFoundError:
                continue
            more, _ = decode_batch(data)
            chosen.append(f)
            records.extend(more)
            # The name says how many were written: whatever did not parse is counted lost.
            unreadable += max(0, f.records - len(more))
        if not chosen:
            return None
        return Chunk(files=tuple(chosen), records=records, unreadable=unreadable)

    def remove(self, chunk: Chunk) -> None:
        """Remove a chunk's batches (the console took them). In a claim."""
        for f in chunk.files:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / f.name).unlink()
