"""Shared test helpers: transcript builders and archive backends a worker process can import.

The backends are selected in a worker with `COMPACTION_ARCHIVE_BACKEND=tests.support.<Name>`,
because the worker is a separate process that a test cannot monkeypatch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from compaction.archives import ArchiveRequest, DatabaseArchive
from compaction.models import Archive


def tool_transcript(
    rounds: int, *, result_chars: int = 20_000, first_seq: int = 1, first_round: int = 0
) -> list[dict[str, Any]]:
    """An Anthropic transcript: one user goal (unless continuing from `first_round`), then
    `rounds` tool calls each with a big result."""
    messages: list[dict[str, Any]] = []
    if first_round == 0:
        messages.append(
            {
                "seq": first_seq,
                "role": "user",
                "content": "Find why the nightly build fails and fix it.",
            }
        )
    seq = first_seq + len(messages)
    for i in range(first_round, first_round + rounds):
        messages.append(
            {
                "seq": seq,
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading log part {i}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{i:03d}",
                        "name": "read_log",
                        "input": {"part": i},
                    },
                ],
            }
        )
        body = (f"part {i} line " + "x" * 60 + "\n") * (result_chars // 75)
        messages.append(
            {
                "seq": seq + 1,
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i:03d}", "content": body}
                ],
            }
        )
        seq += 2
    return messages


def append_body(rounds: int, **kwargs: Any) -> dict[str, Any]:
    return {
        "format": "anthropic",
        "system": "You are a build engineer.",
        "messages": tool_transcript(rounds, **kwargs),
    }


class SlowOnceArchive(DatabaseArchive):
    """Writes the archive, then (once) touches a marker file and sleeps, so a test can kill the
    worker after the archive and before the apply."""

    def archive(self, request: ArchiveRequest) -> Archive:
        archive = super().archive(request)
        marker = Path(os.environ["TEST_SLOW_ARCHIVE_MARKER"])
        if not marker.exists():
            marker.write_text(str(os.getpid()))
            time.sleep(float(os.environ.get("TEST_SLOW_ARCHIVE_SECONDS", "60")))
        return archive
