"""Telemetry records from what an SDK returned: pure functions, no I/O.

The console normalises usage itself (its ingest knows every provider's shape), so a record carries
the provider's usage object verbatim; all this module does is find that object, the model, the
request id and the provider *format* in a raw SDK response or a plain dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The console's names for the usage formats it reads (`provider` in a record).
ANTHROPIC = "anthropic"
OPENAI_CHAT = "openai_chat"
OPENAI_RESPONSES = "openai_responses"
OTEL = "otel"


def jsonable(value: Any) -> Any:
    """A JSON-ready copy of an SDK object: pydantic models dumped without their None fields.

    The SDKs' models carry every optional field as None; the console stores what the provider
    sent, so absent stays absent (and the same message dumps the same bytes every time, which is
    what keeps appends idempotent on `seq`).
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return jsonable(dump(mode="json", exclude_none=True))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def provider_of(response: Any) -> str | None:
    """The usage format of a raw SDK response (or its dict form), None when unknown."""
    kind = field_of(response, "type")
    obj = field_of(response, "object")
    if kind == "message":
        return ANTHROPIC
    if obj in ("chat.completion", "chat.completion.chunk"):
        return OPENAI_CHAT
    if obj == "response":
        return OPENAI_RESPONSES
    return None


def field_of(value: Any, name: str) -> Any:
    """`value[name]` of a mapping, else the attribute (None when absent): SDK objects and
    their dict forms alike."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def build_record(
    response_or_usage: Any,
    *,
    session_id: str,
    turn: int,
    call: int,
    model: str | None = None,
    provider: str | None = None,
    request_id: str | None = None,
    surface_version: int | None = None,
    window_tokens: int | None = None,
    appended_chars: int | None = None,
    prefix: list[dict[str, Any]] | None = None,
    metadata: Mapping[str, str | int | float] | None = None,
) -> dict[str, Any]:
    """One `/telemetry` record from a raw SDK response (Anthropic `Message`, OpenAI
    `ChatCompletion` or `Response`, or their dict forms) or from a usage dict taken verbatim.

    The usage object is never rewritten (None fields aside); `model` falls back to the
    response's own. Raises ValueError when no usage or no model can be found.
    """
    usage: Any
    diagnostics: dict[str, Any] = {}
    raw_usage = field_of(response_or_usage, "usage")
    if raw_usage is not None and not isinstance(raw_usage, int | float):
        usage = jsonable(raw_usage)
        # the provider's cache diagnostics (Anthropic `diagnostics`, OpenAI Responses
        # `prompt_cache_diagnostics`), verbatim: the console reads why a cache missed from them
        for name in ("diagnostics", "prompt_cache_diagnostics"):
            value = jsonable(field_of(response_or_usage, name))
            if isinstance(value, dict):
                diagnostics[name] = value
        model = model or field_of(response_or_usage, "model")
        provider = provider or provider_of(response_or_usage)
        request_id = (
            request_id
            or getattr(response_or_usage, "_request_id", None)
            or field_of(response_or_usage, "id")
        )
    else:
        usage = jsonable(response_or_usage)
    if not isinstance(usage, dict) or not usage:
        raise ValueError("usage: pass a provider response with `usage`, or a usage dict")
    if not model:
        raise ValueError("model: the response names no model; pass model=...")
    record: dict[str, Any] = {
        "session_id": session_id,
        "turn": turn,
        "call": call,
        "model": str(model),
        "usage": usage,
    }
    optional = {
        "provider": provider,
        "request_id": str(request_id) if request_id else None,
        "surface_version": surface_version,
        "window_tokens": window_tokens,
        "appended_chars": appended_chars,
        "prefix": prefix,
        "metadata": dict(metadata) if metadata else None,
    }
    record.update({k: v for k, v in optional.items() if v is not None})
    record.update(diagnostics)
    return record
