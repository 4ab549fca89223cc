"""LLM-backed summarizers (D4): the optional alternative to the core's extractive default.

Outside `context_core` because it does I/O; it still uses only the standard library
(`urllib.request`). It implements `context_core.Summarizer`; its text is stored in the
SummarizeOperation, so deriving a surface never calls the model again.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from context_core import CHARS_PER_TOKEN, Message, TextBlock, ToolCall, ToolResult, bound_text

ANTHROPIC_VERSION = "2023-06-01"

DEFAULT_INSTRUCTIONS = (
    "You compress an AI agent's earlier conversation so it can continue its work. Write a "
    "faithful, dense summary: the user's goals and constraints, each tool called and what it "
    "found (paths, ids, numbers verbatim), decisions taken, and the assistant's latest "
    "conclusions and open questions. No preamble."
)


class SummarizerError(RuntimeError):
    """The summarizer endpoint failed: HTTP status (None for a network error) and detail.

    `public` is what an API answer may say: never the endpoint's URL or its reply body (the
    message, with both, goes to the run's record and the server log, which the operator reads).
    """

    def __init__(
        self, message: str, *, status: int | None = None, body: str = "", public: str = ""
    ) -> None:
        self.status = status
        self.body = body
        self.public = public or message
        # The id of the failed run that recorded it (set by `compaction.services`).
        self.run_id: int | None = None
        super().__init__(message)


def render_transcript(messages: Sequence[Message], *, item_chars: int = 2_000) -> str:
    """A plain-text rendering of `messages` for the summarizing model, each item bounded."""
    lines: list[str] = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, TextBlock) and block.text.strip():
                lines.append(f"[{message.role}] {bound_text(block.text, item_chars)}")
            elif isinstance(block, ToolCall):
                lines.append(f"[tool call {block.name}] {bound_text(block.arguments, item_chars)}")
            elif isinstance(block, ToolResult):
                flag = " (error)" if block.is_error else ""
                lines.append(f"[tool result{flag}] {bound_text(block.text, item_chars)}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class LLMSummarizer:
    """Summarize with a model: Anthropic Messages (`api="anthropic"`, POST
    `{base_url}/v1/messages`, `x-api-key` + `anthropic-version`) or an OpenAI-compatible Chat
    Completions endpoint (`api="openai"`, POST `{base_url}/chat/completions`, `Authorization:
    Bearer`; `base_url` usually ends in `/v1`). Raises SummarizerError on HTTP or network errors,
    timeouts and malformed replies."""

    api: Literal["anthropic", "openai"]
    base_url: str
    model: str
    api_key: str
    timeout: float = 60.0
    instructions: str = DEFAULT_INSTRUCTIONS

    @property
    def name(self) -> str:
        return f"{self.api}:{self.model}"

    def summarize(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        transcript = render_transcript(messages)
        prompt = f"Summarize this conversation:\n\n{transcript}"
        base = self.base_url.rstrip("/")
        headers = {"content-type": "application/json"}
        body: dict[str, Any]
        if self.api == "anthropic":
            url = f"{base}/v1/messages"
            headers |= {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}
            body = {
                "model": self.model,
                "max_tokens": max_tokens,
                "system": self.instructions,
                "messages": [{"role": "user", "content": prompt}],
            }
        else:
            url = f"{base}/chat/completions"
            headers["authorization"] = f"Bearer {self.api_key}"
            body = {
                "model": self.model,
                "max_tokens": max_tokens,
                "messages": [
                    {"role": "system", "content": self.instructions},
                    {"role": "user", "content": prompt},
                ],
            }
        reply = self._post(url, headers, body)
        text = _anthropic_text(reply) if self.api == "anthropic" else _openai_text(reply)
        # The operation promises at most max_tokens × 4 chars, whatever the model returned.
        return bound_text(text, max(max_tokens * CHARS_PER_TOKEN, 2))

    def _post(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> Any:
        data = json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            raise SummarizerError(
                f"{self.name}: HTTP {exc.code} from {url}: {detail}",
                status=exc.code,
                body=detail,
                public=f"{self.name}: the summarizer endpoint answered HTTP {exc.code}",
            ) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise SummarizerError(
                f"{self.name}: request to {url} failed: {exc}",
                public=f"{self.name}: the summarizer endpoint did not answer ({type(exc).__name__})",
            ) from exc
        try:
            return json.loads(payload)
        except json.JSONDecodeError as exc:
            raise SummarizerError(f"{self.name}: reply is not JSON") from exc


def _anthropic_text(reply: Any) -> str:
    try:
        parts = [b["text"] for b in reply["content"] if b.get("type") == "text"]
    except (KeyError, TypeError) as exc:
        raise SummarizerError(f"unexpected Anthropic reply shape: {str(reply)[:200]}") from exc
    if not parts:
        raise SummarizerError("the Anthropic reply has no text")
    return "".join(parts)


def _openai_text(reply: Any) -> str:
    try:
        text = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise SummarizerError(
            f"unexpected Chat Completions reply shape: {str(reply)[:200]}"
        ) from exc
    if not isinstance(text, str) or not text:
        raise SummarizerError("the Chat Completions reply has no text")
    return text
