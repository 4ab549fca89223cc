"""Transcript imports: Claude Code sessions and Codex rollouts (issue 11).

The parsers (`claude_code`, `codex`), the line reader (`reader`) and the records they produce
(`records`) are plain Python without Django, tested on their own; `store` and the command, API and
state table around them are the thin Django side.
"""
