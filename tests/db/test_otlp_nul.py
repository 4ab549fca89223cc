"""A NUL character in any text an OTLP span or log record carries is refused for that item,
naming the attribute (PostgreSQL cannot store NUL in text); the export's other items are
stored and nothing is a 500."""

from __future__ import annotations

from typing import Any

import pytest

from telemetry.models import LLMCall
from tests.db.test_otlp import LOGS, TRACES, pb_span, pb_traces, post
from tests.db.test_otlp_sources import (
    CC_SPAN,
    EVENT,
    GENAI,
    TRACE,
    _logs,
    _named,
    _platform,
    _rejected,
    _traces,
)


def _cc_span(attrs: dict[str, Any]) -> bytes:
    return _traces(_named(pb_span(attrs, trace=TRACE), "claude_code.llm_request"))


def _sdk_span(attrs: dict[str, Any]) -> bytes:
    return _traces(_named(pb_span(attrs, trace=TRACE), "chat claude-sonnet-4-5"))


def _texts(attrs: dict[str, Any]) -> list[str]:
    """The attributes of `attrs` that are text (a NUL can only be in those)."""
    return [name for name, value in attrs.items() if isinstance(value, str)]


CASES = [
    *((TRACES, _cc_span, CC_SPAN, name) for name in _texts(CC_SPAN)),
    *((TRACES, _sdk_span, GENAI, name) for name in _texts(GENAI)),
    *((TRACES, _platform, GENAI, name) for name in _texts(GENAI)),
    # (a NUL in `event.name` names no event we read: the record is ignored, nothing is stored)
    *((LOGS, _logs, EVENT, name) for name in _texts(EVENT) if name != "event.name"),
    (TRACES, _cc_span, {**CC_SPAN, "prompt.id": "p-1"}, "prompt.id"),
    (TRACES, _cc_span, {**CC_SPAN, "speed": "fast"}, "speed"),
]


@pytest.mark.parametrize(
    ("path", "build", "attrs", "name"),
    CASES,
    ids=[f"{b.__name__}-{n}" for _, b, _, n in CASES],
)
def test_a_nul_in_any_text_attribute_is_refused_not_a_500(make_agent, path, build, attrs, name):
    value = attrs[name]
    agent = make_agent()
    response = post(agent, path, build({**attrs, name: value[:1] + "\x00" + value[1:]}))
    assert response.status_code in (200, 400), response.content[:300]
    rejected, message = _rejected(response)
    assert rejected == 1, message
    assert f"{name}: must not contain NUL characters" in message, message
    assert not LLMCall.objects.exists()


COMPACTION = {
    "event.name": "compaction",
    "session.id": "cc-1",
    "prompt.id": "p-1",
    "trigger": "auto",
}
OVERFLOW = {
    "event.name": "api_error",
    "session.id": "cc-1",
    "prompt.id": "p-1",
    "error": "prompt is too long: 210000 tokens > 200000 maximum",
}


@pytest.mark.parametrize(
    ("attrs", "name"),
    [
        (COMPACTION, "prompt.id"),
        (COMPACTION, "trigger"),
        (OVERFLOW, "error"),
        (OVERFLOW, "prompt.id"),
    ],
)
def test_a_nul_in_an_events_text_is_refused_naming_it(make_agent, attrs, name):
    agent = make_agent()
    value = attrs[name]
    response = post(agent, LOGS, _logs({**attrs, name: value + "\x00"}))
    assert response.status_code == 200
    assert _rejected(response) == (
        1,
        f"rejected 1 log records: item 0: {name}: must not contain NUL characters",
    )


def test_a_nul_in_the_resource_refuses_its_items_and_the_other_items_are_stored(make_agent):
    agent = make_agent()
    nul = pb_traces(
        _named(pb_span(CC_SPAN, trace=TRACE), "claude_code.llm_request"),
        resource={"service.name": "my-app", "user.email": "a\x00@example.com"},
    )
    response = post(agent, TRACES, nul)
    assert _rejected(response)[1].endswith("resource.user.email: must not contain NUL characters")
    clean = _cc_span(CC_SPAN)
    assert _rejected(post(agent, TRACES, clean)) == (0, "")
    assert LLMCall.objects.count() == 1
