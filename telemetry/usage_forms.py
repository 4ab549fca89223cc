"""A call's raw usage as stored: nothing when its token buckets say all of it.

Most calls report the provider's plain usage object, whose every value is one of the call's
buckets (Anthropic's `input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`,
`output_tokens`). Kept verbatim it was the largest column of the calls table (make bench
BENCH_SCALE=fleet, docs/performance.md); so a usage object that equals what `derived_usage`
builds from the buckets is stored as NULL, and every reader gets it back through `usage_as_sent`.
Anything else (another shape, another key, another value, a float, a bool) is stored verbatim.

The one definition of both directions: `stored_usage` keeps a usage only when `derived_usage`
would not give it back equal, so a read is exact by construction, whatever later changes the
buckets' tiers (`telemetry.repricing` moves writes between 5m and 1h; their sum, which is what
Anthropic's flat `cache_creation_input_tokens` says, stays). No Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from telemetry.usage import InputCounts


class Buckets(InputCounts, Protocol):
    """What a stored call holds of its usage: its format, its input buckets and its output."""

    @property
    def provider(self) -> str: ...
    @property
    def output(self) -> int: ...


def derived_usage(
    provider: str, uncached: int, read: int, write_5m: int, write_1h: int, output: int
) -> dict[str, int] | None:
    """The usage object a call of `provider` with these buckets reported in the usual shape,
    None for a format with no such shape here. Its keys in jsonb's order (shorter keys first),
    so PostgreSQL gives a stored object and a derived one back alike."""
    if provider != "anthropic":
        return None
    return {
        "input_tokens": uncached,
        "output_tokens": output,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_5m + write_1h,
    }


def stored_usage(
    provider: str,
    usage: Mapping[str, Any],
    uncached: int,
    read: int,
    write_5m: int,
    write_1h: int,
    output: int,
) -> Mapping[str, Any] | None:
    """What the calls table keeps of `usage`: None when `derived_usage` gives it back equal
    (every value an int, no other key), else `usage` itself."""
    derived = derived_usage(provider, uncached, read, write_5m, write_1h, output)
    # equal as mappings (the same keys, equal values: in C), and then every value an int, since
    # equality takes 4.0 or True for 4 or 1
    if derived is None or usage != derived:
        return usage
    for value in usage.values():
        if type(value) is not int:
            return usage
    return None


def usage_as_sent(stored: Any, call: Buckets) -> Any:
    """The usage `call` was reported with: what is stored, or, when nothing is, the derived
    object (`stored_usage`'s None)."""
    if stored is not None:
        return stored
    derived = derived_usage(
        call.provider,
        call.uncached_input,
        call.cache_read,
        call.cache_write_5m,
        call.cache_write_1h,
        call.output,
    )
    return {} if derived is None else derived
