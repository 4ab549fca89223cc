"""The console shows the stored surface (read back with its seqs) instead of re-deriving it from
the log, and what it shows is exactly what deriving would show."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from compaction.models import Surface
from compaction.transcripts import derive, stored_surface_messages
from console.presenters.transcripts import ShownSurface, shown_messages, shown_surface
from console.selectors.compaction import surface_now
from telemetry.models import AgentSession
from tests.support import append_body, tool_transcript

pytestmark = pytest.mark.django_db(transaction=True)

OPENAI = (
    '{"format": "openai", "messages": [\n'
    '  {"seq": 0, "role": "system", "content": "be brief"},\n'
    '  {"seq": 1, "role": "user", "content": "run it"},\n'
    '  {"seq": 2, "role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": '
    '"function", "function": {"name": "sh", "arguments": "{\\"cmd\\": \\"cat bin\\"}"}}]},\n'
    '  {"seq": 3, "role": "tool", "tool_call_id": "c1", "content": "a\\u0000b \\u00e9"},\n'
    '  {"seq": 4, "role": "assistant", "content": "done"}\n]}'
)


def derived(session: AgentSession) -> ShownSurface:
    _, _, surface = derive(session, use_cache=False)
    return ShownSurface(
        shown_messages(surface.messages),
        version=session.surface_version,
        tokens=surface.tokens,
        chars=surface.chars,
    )


def shown_without_reading_the_log(session: AgentSession) -> ShownSurface:
    session.refresh_from_db()
    with CaptureQueriesContext(connection) as queries:
        shown = shown_surface(surface_now(session))
    assert not [q["sql"] for q in queries if "compaction_logmessage" in q["sql"]]
    return shown


def test_a_compacted_anthropic_surface_reads_back_as_deriving_shows_it(compactor):
    assert compactor.post("/api/v1/sessions/s/messages", append_body(12)).status_code == 201
    assert compactor.post("/api/v1/sessions/s/compact").json()["status"] == "applied"
    more = {"format": "anthropic", "messages": tool_transcript(2, first_seq=26, first_round=12)}
    assert compactor.post("/api/v1/sessions/s/messages", more).status_code == 201
    session = AgentSession.objects.get(external_id="s")

    shown = shown_without_reading_the_log(session)
    assert shown == derived(session)
    # the compaction replaced older rounds (stubs or a summary) and the system prompt stays first
    assert shown.stubs > 0 or any(m.summarizes for m in shown.messages)
    assert shown.messages[0].role == "system"


def test_an_openai_surface_reads_back_as_deriving_shows_it(agent):
    assert agent.post("/api/v1/sessions/o/messages", OPENAI).status_code == 201
    session = AgentSession.objects.get(external_id="o")

    shown = shown_without_reading_the_log(session)
    assert shown == derived(session)
    assert [m.seq for m in shown.messages] == [0, 1, 2, 3, 4]


def test_a_surface_stored_before_its_seqs_is_derived(agent):
    assert agent.post("/api/v1/sessions/old/messages", append_body(3)).status_code == 201
    session = AgentSession.objects.get(external_id="old")
    Surface.objects.filter(session=session).update(seqs=[])

    assert stored_surface_messages(Surface.objects.get(session=session)) is None
    session.refresh_from_db()
    assert shown_surface(surface_now(session)) == derived(session)
