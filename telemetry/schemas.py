"""Request and response schemas of the telemetry API."""

from __future__ import annotations

from typing import Literal

from ninja import Schema


class PolicyOut(Schema):
    profile: str
    cache_ttl: Literal["5m", "1h"]
    prune_threshold: float
    summarize_threshold: float
    keep_rounds: int
    keep_rounds_verbatim: int
    stub_head_chars: int
    stub_tail_chars: int
    max_result_chars: int
    prune_min_free_tokens: int
    prune_exclude_tools: list[str]
    summary_max_tokens: int
    reserved_output_tokens: int
    round_soft_limit: int
    nudge_text: str
    round_hard_cap: int
    archive_retention_days: int


class ErrorOut(Schema):
    detail: str
    field: str | None = None
