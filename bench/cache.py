"""P12: classifying a session's cache misses, per 10,000 calls, against reading those calls.

The baseline (B_calls) is the raw SELECT of the fields classification needs, for the P3 big
session's calls (one per turn), in position order. P12 is what the product does with those rows:
build the observations (prices from the catalogue, read once beforehand) and run `telemetry.cache_misses.classify`
— the cause search included. Both are scaled to 10,000 calls; the bar is P12 ≤ 2 × B_calls.
"""

from __future__ import annotations

import time
from statistics import median
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.run import Bench

FIELDS = (
    "id",
    "turn",
    "call",
    "at",
    "model",
    "provider",
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "reported_cache",
    "surface_version",
    "prefix",
    "context_tokens",
    "provider_miss_type",
    "provider_missed_tokens",
    "provider_diagnostics",
)


def measure_p12(bench: Bench) -> None:
    from bench.run import Bar, _ms
    from compaction.cache_report import _observation, _Prices
    from telemetry.cache_misses import classify

    session = bench.big
    sql = (
        f"SELECT {', '.join(FIELDS)} FROM telemetry_llmcall "
        "WHERE session_id = %s ORDER BY turn, call"
    )
    with bench.raw() as conn:
        rows: list[tuple[object, ...]] = []

        def read(run: int) -> float:
            nonlocal rows
            began = time.perf_counter()
            rows = conn.execute(sql, [session.pk]).fetchall()
            return (time.perf_counter() - began) * 1000

        reads = bench.runs(read) + [read(0) for _ in range(4)]
    calls = len(rows)
    dicts = [dict(zip(FIELDS, row, strict=True)) for row in rows]
    misses = 0
    # The catalogue is read once per report (a read, like B_calls, not classification).
    prices = _Prices()
    prices.table(str(row["model"]) for row in dicts)

    def classify_all(run: int) -> float:
        nonlocal misses
        began = time.perf_counter()
        observed = [_observation(row, prices(str(row["model"]))) for row in dicts]
        misses = len(classify(observed, prices=prices.table(o.model for o in observed)))
        return (time.perf_counter() - began) * 1000

    runs = bench.runs(classify_all) + [classify_all(0) for _ in range(4)]
    per = 10_000 / max(calls, 1)
    read_ms, classify_ms = median(reads) * per, median(runs) * per
    bench.baseline("B_calls", ms_per_10k=read_ms, calls=calls, samples_ms=reads)
    bench.measurement("P12", ms_per_10k=classify_ms, calls=calls, misses=misses, samples_ms=runs)
    bench.bars.append(
        Bar(
            "P12",
            f"cache-miss classification per 10,000 calls ({calls:,} calls, {misses:,} misses)",
            _ms(classify_ms),
            f"B_calls {_ms(read_ms)}",
            classify_ms / read_ms,
            "≤ 2 ×",
            classify_ms / read_ms <= 2,
        )
    )
