"""Micro-benchmark of the compaction core (not a timed test).

Builds a deterministic tool-heavy Anthropic transcript (10,000 messages, ~4M chars ≈ 1M tokens;
`--smoke` for a tiny one), then prints the median milliseconds of: the relief planner in normal
and forced mode, `derive_surface`, and — as the baseline — a plain `json.dumps` + `json.loads`
round trip of the same transcript. Run: `python -m bench.bench_core [--smoke] [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from context_core import (
    BoundSpec,
    Message,
    ReliefPolicy,
    canonical_json,
    derive_surface,
    parse_anthropic,
    plan_relief,
)


def build_transcript(messages: int, result_chars: int) -> list[dict[str, Any]]:
    """A user goal, then rounds of assistant call + user result, deterministic to the byte."""
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Audit the repository for NUL handling."}
    ]
    rounds = (messages - 1) // 2
    for i in range(rounds):
        items.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {i}: reading the next file."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:06d}",
                        "name": ("read_file", "grep", "run")[i % 3],
                        "input": {"path": f"src/module_{i % 97}.py", "offset": i},
                    },
                ],
            }
        )
        line = f"{i:06d}: def handler_{i}(data):  # \u00e9 \u6f22\n"
        # Tool-heavy and uneven, like real sessions: most results small, every tenth a big read.
        size = result_chars * 6 if i % 10 == 0 else result_chars // 4
        body = (line * (size // len(line) + 1))[:size]
        items.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i:06d}", "content": body}
                ],
            }
        )
    while len(items) < messages:
        items.append({"role": "assistant", "content": "Done."})
    return items


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true", help="a tiny transcript, for CI")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    count, size = (41, 400) if args.smoke else (10_000, 1_000)
    items = build_transcript(count, size)
    log: list[Message] = parse_anthropic(
        items, system="You are an auditor.", bound=BoundSpec(50_000)
    )
    chars = sum(m.chars for m in log)
    surface = derive_surface(log)
    tokens = surface.tokens
    # A window in which the transcript sits at 0.7 pressure: above prune, below summarize.
    policy = ReliefPolicy(window_tokens=int(tokens / 0.7) + 16_000, reserved_output_tokens=16_000)
    runs = args.runs

    print(f"transcript: {len(log)} messages, {chars:,} chars, ~{tokens:,} tokens")
    results = {
        "plan normal": median_ms(lambda: plan_relief(surface, policy=policy), runs),
        "plan forced": median_ms(lambda: plan_relief(surface, policy=policy, mode="forced"), runs),
        "derive_surface": median_ms(lambda: derive_surface(log), runs),
        "json round trip": median_ms(lambda: json.loads(json.dumps(items)), runs),
    }
    normal = plan_relief(surface, policy=policy)
    forced = plan_relief(surface, policy=policy, mode="forced")
    results["derive + normal ops"] = median_ms(lambda: derive_surface(log, normal.operations), runs)
    results["derive + forced ops"] = median_ms(lambda: derive_surface(log, forced.operations), runs)
    results["canonical_json"] = median_ms(lambda: canonical_json(surface), runs)
    for name, ms in results.items():
        print(f"{name:>20}: {ms:9.2f} ms")
    baseline = results["json round trip"]
    print(f"normal plan: {normal.action} ({normal.reason})")
    print(f"forced plan: {forced.action} ({forced.reason})")
    for mode in ("normal", "forced"):
        core = results[f"plan {mode}"] + results[f"derive + {mode} ops"]
        print(f"(plan {mode} + derive) / json round trip = {core / baseline:.2f}")


if __name__ == "__main__":
    main()
