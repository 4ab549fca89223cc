"""Reading the transcript log back (issue 16, item 15): every message an agent sent, as stored.

`GET /api/v1/sessions/{session_id}/log` pages through the append-only log in `seq` order at any
time — before any compaction as after — so an agent or an operator can export everything that
was sent. Each message is served as the exact JSON text that was appended (its `seq` included;
the Anthropic system prompt is seq 0), never re-encoded; a message whose text log retention
removed from the log is read back from the archive that holds it.
"""

from __future__ import annotations

import json
from typing import Annotated

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from ninja import Router
from pydantic import Field

from compaction.log_retention import archived_texts, removed_seqs
from compaction.models import LogMessage
from compaction.schemas import LogPageOut
from telemetry.auth import ingest_auth, request_key
from telemetry.models import AgentSession
from telemetry.schemas import ErrorOut

router = Router(tags=["compaction"])

MAX_PAGE = 1000


@router.get(
    "/sessions/{session_id}/log",
    auth=ingest_auth,
    response={200: LogPageOut, 404: ErrorOut, 422: ErrorOut},
    summary="Page through the session's log: the messages as they were appended",
)
def get_log(
    request: HttpRequest,
    session_id: str,
    after_seq: Annotated[int, Field(ge=-1, le=2**31 - 1)] = -1,
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 200,
) -> HttpResponse:
    """Up to `limit` messages with `seq` > `after_seq`, in order, each byte for byte as
    appended. `next_after_seq` is the `after_seq` of the next page, null on the last one.

    The page is written from the stored text of each message, not serialised through
    `LogPageOut` (which documents it): a re-encoded message would not be the bytes appended."""
    key = request_key(request)
    session = get_object_or_404(AgentSession, profile=key.profile, external_id=session_id)
    rows = list(
        LogMessage.objects.filter(session=session, seq__gt=after_seq)
        .order_by("seq")
        .values_list("seq", "format", "raw")[: limit + 1]
    )
    more = len(rows) > limit
    rows = rows[:limit]
    total = LogMessage.objects.filter(session=session).count()
    fmt = (
        rows[0][1]
        if rows
        else LogMessage.objects.filter(session=session).values_list("format", flat=True).first()
    )
    head = {
        "session_id": session.external_id,
        "format": fmt,
        "log_messages": total,
        "next_after_seq": rows[-1][0] if more else None,
    }
    prefix = json.dumps(head, ensure_ascii=True)[:-1]
    texts = [raw for _, _, raw in rows]
    removed = [i for i, text in enumerate(texts) if not text]
    if removed:
        texts = _restored(session, rows, removed, texts)
    body = prefix + ',"messages":[' + ",".join(texts) + "]}"
    return HttpResponse(body.encode("utf-8"), content_type="application/json")


def _restored(
    session: AgentSession, rows: list[tuple[int, str, str]], removed: list[int], texts: list[str]
) -> list[str]:
    """`texts` with each message whose text log retention removed read back from the archive
    holding it (byte for byte as appended); one whose archive cannot give it back is served as
    `{"seq": n, "removed_by_retention": true, "archive_id": a}`, never as made-up text."""
    seqs = [rows[i][0] for i in removed]
    found = archived_texts(session.pk, seqs)
    where = removed_seqs(session.pk, seqs)
    out = list(texts)
    for i in removed:
        seq = rows[i][0]
        if seq in found:
            out[i] = found[seq][1]
        else:
            out[i] = json.dumps(
                {"seq": seq, "removed_by_retention": True, "archive_id": where.get(seq)}
            )
    return out
