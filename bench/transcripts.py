"""A synthetic Claude Code transcript of a given size, for the import benchmark (issue 11).

Each turn: a prompt, one response written as three lines (thinking with a signature, text,
tool_use) repeating a growing usage, a tool result of about 2 KB, and a closing text; a
compact_boundary with its summary every `compact_every` turns, as Claude Code does under
pressure. Deterministic: the same size gives the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "bench-import-0000-4000-8000-000000000000"
MODEL = "claude-sonnet-4-5-20250929"


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _usage(context: int, out: int) -> dict[str, Any]:
    return {
        "input_tokens": 8,
        "cache_read_input_tokens": max(0, context - 1_500),
        "cache_creation_input_tokens": 1_492,
        "output_tokens": out,
    }


def _turn(n: int, context: int) -> list[str]:
    at = f"2026-11-30T{(n // 3600) % 24:02d}:{(n // 60) % 60:02d}:{n % 60:02d}.000Z"
    base = {"sessionId": SESSION, "timestamp": at}
    filler = ("lorem ipsum dolor sit amet " * 80)[:2_000]

    def assistant(uuid: str, msg: str, req: str, block: dict[str, Any], out: int, stop: Any) -> str:
        return _line(
            {
                **base,
                "type": "assistant",
                "uuid": uuid,
                "requestId": req,
                "message": {
                    "id": msg,
                    "role": "assistant",
                    "model": MODEL,
                    "content": [block],
                    "stop_reason": stop,
                    "usage": _usage(context, out),
                },
            }
        )

    return [
        _line(
            {
                **base,
                "type": "user",
                "uuid": f"p{n}",
                "message": {"role": "user", "content": f"Task {n}: {filler[:300]}"},
            }
        ),
        assistant(
            f"a{n}",
            f"msg_{n}a",
            f"req_{n}a",
            {"type": "thinking", "thinking": filler[:600], "signature": "c2ln" * 40},
            50,
            None,
        ),
        assistant(
            f"b{n}", f"msg_{n}a", f"req_{n}a", {"type": "text", "text": filler[:400]}, 120, None
        ),
        assistant(
            f"c{n}",
            f"msg_{n}a",
            f"req_{n}a",
            {
                "type": "tool_use",
                "id": f"toolu_{n}",
                "name": "Bash",
                "input": {"command": f"run {n}"},
            },
            180,
            "tool_use",
        ),
        _line(
            {
                **base,
                "type": "user",
                "uuid": f"r{n}",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": filler}
                    ],
                },
            }
        ),
        assistant(
            f"d{n}",
            f"msg_{n}b",
            f"req_{n}b",
            {"type": "text", "text": f"Done with {n}."},
            40,
            "end_turn",
        ),
    ]


def _compaction(n: int) -> list[str]:
    base = {"sessionId": SESSION, "timestamp": "2026-11-30T12:00:00.000Z"}
    return [
        _line(
            {
                **base,
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": f"cb{n}",
                "compactMetadata": {"trigger": "auto", "preTokens": 160_000},
            }
        ),
        _line(
            {
                **base,
                "type": "user",
                "uuid": f"cs{n}",
                "isCompactSummary": True,
                "message": {
                    "role": "user",
                    "content": f"This session is being continued. Summary up to task {n}.",
                },
            }
        ),
    ]


def write_transcript(path: Path, size_bytes: int, *, compact_every: int = 400) -> dict[str, int]:
    """Write at least `size_bytes` of transcript to `path`; return lines, bytes, turns, requests."""
    written = lines = turns = 0
    context = 10_000
    with path.open("w") as handle:
        while written < size_bytes:
            chunk = _turn(turns, context)
            turns += 1
            context += 1_200
            if turns % compact_every == 0:
                chunk += _compaction(turns)
                context = 10_000
            for line in chunk:
                handle.write(line)
                written += len(line.encode())
                lines += 1
    return {"lines": lines, "bytes": written, "turns": turns, "requests": 2 * turns}


def own_peak_rss_kb() -> int:
    """This process's own peak RSS: `VmHWM`, which belongs to the memory image exec started.

    Not `getrusage(RUSAGE_SELF).ru_maxrss`: Linux carries that across exec from the process
    that forked this one, so a child started by the bench after its other parts reported the
    bench's own ~550 MB as the import's peak (its real peak was ~120 MB).
    """
    import os
    import resource

    from bench.services import status_kb

    own = status_kb(os.getpid(), "VmHWM")
    return own if own is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_import(path: str, profile: str) -> dict[str, Any]:
    """Import `path` into `profile` in this process; figures and this process's peak RSS."""
    import time

    from compaction.imports.store import import_file
    from telemetry.profiles import get_or_create_profile

    owner = get_or_create_profile(name=profile)
    began = time.perf_counter()
    with open(path, "rb") as handle:  # noqa: PTH123 (binary handle for the importer)
        report = import_file(profile=owner, path=path, handle=handle)
    seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "lines": report.lines,
        "bytes": report.bytes,
        "messages": report.messages,
        "calls": report.calls,
        "compactions": report.compactions,
        "skipped": len(report.skipped),
        "peak_rss_kb": own_peak_rss_kb(),
    }


if __name__ == "__main__":
    import sys

    import django

    django.setup()
    print(json.dumps(run_import(sys.argv[1], sys.argv[2])))
