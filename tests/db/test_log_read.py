"""Issue 16 item 15: the log reads back, paged, before any compaction, as it was appended."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import append_body

pytestmark = pytest.mark.django_db


def read_all(agent, session_id: str, limit: int) -> tuple[list[dict[str, Any]], list[bytes]]:
    messages, bodies, after = [], [], -1
    while True:
        response = agent.get(f"/api/v1/sessions/{session_id}/log?after_seq={after}&limit={limit}")
        assert response.status_code == 200, response.content
        bodies.append(response.content)
        page = response.json()
        messages.extend(page["messages"])
        if page["next_after_seq"] is None:
            return messages, bodies
        after = page["next_after_seq"]


def test_the_log_pages_back_every_message_byte_for_byte_before_any_compaction(compactor):
    body = append_body(6)
    assert compactor.post("/api/v1/sessions/l1/messages", body).status_code == 201
    odd = '{"seq": 14,   "role": "user", "content": "caf\\u00e9 \\u0000 ok"}'
    text = '{"format": "anthropic", "messages": [' + odd + "]}"
    response = compactor.client.post(
        "/api/v1/sessions/l1/messages",
        text,
        content_type="application/json",
        headers=compactor.headers(),
    )
    assert response.status_code == 201, response.content
    messages, bodies = read_all(compactor, "l1", limit=5)
    assert [m["seq"] for m in messages] == list(range(15))
    assert messages[0] == {"seq": 0, "role": "system", "content": body["system"]}
    assert messages[1:14] == body["messages"]
    assert odd.encode() in bodies[-1]  # the exact appended text, escapes and spacing kept
    page = json.loads(bodies[0])
    assert page["log_messages"] == 15 and page["format"] == "anthropic"
    # after a compaction the log is unchanged
    assert compactor.post("/api/v1/sessions/l1/compact").status_code == 200
    assert read_all(compactor, "l1", limit=1000)[0] == messages


def test_another_profiles_log_is_404_and_bad_paging_is_422(agent, outsider):
    assert agent.post("/api/v1/sessions/l2/messages", append_body(1)).status_code == 201
    assert outsider.get("/api/v1/sessions/l2/log").status_code == 404
    assert agent.get("/api/v1/sessions/l2/log?limit=0").status_code == 422
    assert agent.get("/api/v1/sessions/l2/log?after_seq=-2").status_code == 422
