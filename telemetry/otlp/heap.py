"""Giving a large OTLP export's memory back to the operating system once it is stored.

A maximal export (OTLP_MAX_DECODED_BYTES inflated, OTLP_MAX_ITEMS_PER_EXPORT items) briefly
holds tens of megabytes: the inflated body, protobuf's copy of it, each item's attributes. Python
frees all of it, but glibc's allocator keeps freed pages for reuse, in one arena per thread that
used them, so a gthread worker's resident memory climbed to several times its baseline after a
run of maximal exports and stayed there. After an export inflated past `LARGE_BYTES` the worker
collects cyclic garbage and asks glibc to return free pages (`malloc_trim`); small exports, the
usual case, pay nothing. Elsewhere than glibc the trim is skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable
from functools import cache
from typing import Final

LARGE_BYTES: Final = 1024 * 1024  # an export inflated past this is followed by a release


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return trim


def release_after(inflated_bytes: int) -> bool:
    """After an export of `inflated_bytes`: collect and trim when it was large. True if it did."""
    if inflated_bytes < LARGE_BYTES:
        return False
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return True
