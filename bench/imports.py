"""P11: transcript import throughput and peak memory (issue 11).

A synthetic Claude Code transcript (`bench.transcripts`: 100 MB in a full run, 1 MB with
--smoke) is imported by a separate process on the bench database, as `manage.py
import_transcripts` would; its own peak RSS is the memory figure. The baseline B_parse runs the
pure parser alone over the same file (no database), so the ratio says what storing costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from bench.services import ROOT

if TYPE_CHECKING:
    from bench.run import Bench

FULL_BYTES = 100_000_000
SMOKE_BYTES = 1_000_000
# Bounded memory: the chunk (5,000 lines / 16 MB), the parsed log from the last agent
# compaction on, and the in-process log cache; never the file's size.
RSS_BAR_MB = 400

PARSE_ONLY = """
import json, sys, time
from bench.transcripts import own_peak_rss_kb
from compaction.imports.files import detect_format, make_parser
from compaction.imports.reader import read_lines
path = sys.argv[1]
began = time.perf_counter()
lines = records = 0
with open(path, "rb") as handle:
    parser = make_parser(detect_format(handle), path, None)
    for line in read_lines(handle):
        records += len(parser.feed(line.number, line.text))
        lines += 1
    records += len(parser.flush(final=True))
print(json.dumps({"seconds": time.perf_counter() - began, "lines": lines, "records": records,
                  "peak_rss_kb": own_peak_rss_kb()}))
"""


def _child(bench: Bench, args: list[str]) -> dict[str, Any]:
    env = {**bench.environment(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[:2]} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure_p11(bench: Bench) -> None:
    from bench.run import Bar
    from bench.transcripts import write_transcript

    size = SMOKE_BYTES if bench.args.smoke else FULL_BYTES
    path = bench.var_dir / "transcript-import.jsonl"
    shape = write_transcript(path, size)
    parse = _child(bench, ["-c", PARSE_ONLY, str(path)])
    imported = _child(bench, ["-m", "bench.transcripts", str(path), "bench-import"])
    again = _child(bench, ["-m", "bench.transcripts", str(path), "bench-import"])
    mb = shape["bytes"] / 1e6
    lines_per_s = imported["lines"] / imported["seconds"]
    parse_lines_per_s = parse["lines"] / parse["seconds"]
    rss_mb = imported["peak_rss_kb"] / 1024
    bench.baseline("B_parse", lines_per_s=parse_lines_per_s, **parse)
    bench.measurement(
        "P11",
        lines_per_s=lines_per_s,
        mb_per_s=mb / imported["seconds"],
        peak_rss_mb=rss_mb,
        reimport_s=again["seconds"],
        reimport_lines=again["lines"],
        file=shape,
        **imported,
    )
    complete = imported["calls"] == shape["requests"] and again["lines"] == 0
    bench.bars.append(
        Bar(
            "P11",
            f"import of a {mb:,.0f} MB Claude Code transcript ({shape['lines']:,} lines, "
            f"{shape['requests']:,} requests, {imported['compactions']} agent compactions); "
            f"{mb / imported['seconds']:.2f} MB/s, peak RSS {rss_mb:,.0f} MB; "
            f"re-import {again['seconds']:.1f} s, {again['lines']} lines",
            f"{lines_per_s:,.0f} lines/s",
            f"B_parse {parse_lines_per_s:,.0f} lines/s",
            lines_per_s / parse_lines_per_s,
            f"peak RSS ≤ {RSS_BAR_MB} MB; every request stored once",
            rss_mb <= RSS_BAR_MB and complete,
        )
    )
