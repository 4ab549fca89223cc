"""An archive reads back byte for byte: `GET /api/v1/archives/{id}` and the console's downloads
serve each archived message as the exact text that was appended, as `GET /log` does (non-ASCII
kept raw, escapes kept escaped, numbers as written)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from compaction.models import Archive
from tests.db.conftest import signed_in
from tests.support import tool_transcript

pytestmark = pytest.mark.django_db

# Each would change under a parse and re-encode: a raw é and emoji (→ \u escapes), an escaped
# é (→ é), an escaped NUL and quote, 1.50 (→ 1.5), 1E2 (→ 100.0), -0 and a big
# integer, spacing inside the message.
ODD = [
    '{"seq": 1, "role": "user", "content": "café 🙂 \\u00e9 \\u0000 \\"q\\""}',
    '{"seq":2,"role":"assistant","content":[{"type":"text","text":"ok"},'
    '{"type":"tool_use","id":"toolu_odd","name":"run","input":'
    '{"n": 1.50, "m": 1E2, "z": -0, "big": 123456789012345678901234567890, "t": "\\u00e9"}}]}',
    '{ "seq" : 3 , "role" : "user" , "content" : [ {"type": "tool_result", '
    '"tool_use_id": "toolu_odd", "content": "Ünïcödé ✓\\n\\t\\u2028 done"} ] }',
]


def test_an_archive_serves_each_message_as_appended_through_the_api_and_the_downloads(compactor):
    rounds = [json.dumps(m) for m in tool_transcript(6, result_chars=4_000, first_seq=3)[1:]]
    appended = ['{"seq":0,"role":"system","content":"Tu es ingénieur."}', *ODD, *rounds]
    body = (
        '{"format": "anthropic", "system": "Tu es ingénieur.", "messages": ['
        + ", ".join([*ODD, *rounds])
        + "]}"
    )
    response = compactor.post("/api/v1/sessions/bytes/messages", body.encode())
    assert response.status_code == 201, response.content
    log = compactor.get("/api/v1/sessions/bytes/log?limit=1000").content
    assert ("[" + ",".join(appended) + "]").encode() in log

    compacted = compactor.post("/api/v1/sessions/bytes/compact")
    assert compacted.status_code == 200 and compacted.json()["archived"], compacted.content
    archive = Archive.objects.get(session__external_id="bytes")
    served = compactor.get(f"/api/v1/archives/{archive.pk}")
    assert served.status_code == 200 and served["Content-Type"] == "application/json"
    assert (',"log":[' + ",".join(appended) + '],"surface":').encode() in served.content
    document = served.json()
    assert [m["seq"] for m in document["log"]] == list(range(len(appended)))
    assert document["log"][2]["content"][1]["input"]["m"] == 100.0
    assert document["surface"] == json.loads(archive.surface)
    assert document["session_id"] == "bytes" and document["log_messages"] == len(appended)

    console = signed_in("viewer", "archive-viewer")
    whole = console.get(reverse("archive_download", args=[archive.pk, "json"]))
    assert whole.content == served.content + b"\n"
    lines = console.get(reverse("archive_download", args=[archive.pk, "jsonl"]))
    # one message a line; the only change: line breaks between tokens become spaces
    assert lines.content.decode().split("\n") == [*appended, ""]
