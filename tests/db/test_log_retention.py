"""Log retention (issue 35): the text of old messages the surface no longer shows goes once an
archive holds it; the surface, earlier versions, the log API and exports keep every byte, and
the archive purge keeps an archive while it is the only copy."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from compaction import log_retention
from compaction.archives import archived_messages, purge_expired_archives
from compaction.log_cache import LOG_CACHE
from compaction.log_retention import ExpiringTexts, RemovedText, expiring_texts, remove_expired_text
from compaction.models import (
    Archive,
    ArchiveChunk,
    CompactionOperation,
    LogMessage,
    Surface,
    SurfaceVersion,
)
from compaction.session_export import export_lines, sessions_to_export
from compaction.session_import import import_lines
from compaction.tasks import apply_log_retention
from compaction.transcripts import derive, format_of, surface_at
from console.policy_impact import policy_impact
from context_core import AgentCompactionOperation, canonical_json, hidden_seqs
from telemetry.errors import FieldError
from telemetry.models import AgentSession
from telemetry.policy_store import effective_policy, update_policy
from tests.db.conftest import make_user
from tests.db.test_compaction_api import session_of
from tests.support import append_body, tool_transcript

pytestmark = pytest.mark.django_db

HIDDEN = list(range(2, 18))  # the summary of the first compaction of 12 rounds stands for these


@pytest.fixture(autouse=True)
def no_parsed_logs(monkeypatch):
    """Every read parses the stored log: a parse this process kept from before the retention
    would still hold the removed text, and the readers must do without it."""
    monkeypatch.setattr(LOG_CACHE, "budget", 0)
    LOG_CACHE.entries.clear()
    LOG_CACHE.total = 0


@pytest.fixture
def compacted(compactor) -> AgentSession:
    """12 tool rounds (26 messages), compacted once (prune + a summary of seqs 2..17), the log
    30 days old, the profile keeping the text 7 days."""
    assert compactor.post("/api/v1/sessions/run-1/messages", append_body(12)).status_code == 201
    assert compactor.post("/api/v1/sessions/run-1/compact").json()["status"] == "applied"
    session = session_of(compactor)
    LogMessage.objects.update(created_at=timezone.now() - timedelta(days=30))
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 7})
    return session


def _surfaces(session: AgentSession) -> dict[int, bytes]:
    versions = SurfaceVersion.objects.filter(session=session).values_list("version", flat=True)
    found = {v: surface_at(session, v) for v in versions}
    return {v: canonical_json(s) for v, s in found.items() if s is not None}


def _log_page(agent) -> bytes:
    return bytes(agent.get("/api/v1/sessions/run-1/log?limit=1000").content)


def test_retention_removes_only_hidden_archived_text_and_every_surface_keeps_its_bytes(
    compactor, compacted
):
    body = Surface.objects.get(session=compacted).body
    versions = _surfaces(compacted)
    page = _log_page(compactor)
    raw = dict(LogMessage.objects.values_list("seq", "raw"))
    log, operations, _ = derive(compacted, use_cache=False)
    assert list(hidden_seqs(log, operations)) == HIDDEN

    done = remove_expired_text()
    assert (done.messages, done.has_more) == (len(HIDDEN), False)
    removed = LogMessage.objects.filter(removed_at__isnull=False)
    assert sorted(removed.values_list("seq", flat=True)) == HIDDEN
    archive = Archive.objects.get()
    assert set(removed.values_list("raw", "archive_id")) == {("", archive.pk)}
    # seq, role, size and digest stay: the hash chain and the counts still hold
    assert LogMessage.objects.count() == 26

    assert Surface.objects.get(session=compacted).body == body
    _, _, again = derive(compacted, use_cache=False)
    assert canonical_json(again, format=format_of("anthropic")).decode() == body
    # version 1 showed the removed messages verbatim: rebuilt from the archive, byte for byte
    assert _surfaces(compacted) == versions
    assert _log_page(compactor) == page
    # once; and a session whose old text left is all shown is not looked at again
    assert remove_expired_text() == RemovedText(0, 0, False)
    # a replay of a removed seq is still a duplicate; other content at it still a conflict
    first = json.loads(raw[2])
    replay = compactor.post(
        "/api/v1/sessions/run-1/messages", {"format": "anthropic", "messages": [first]}
    )
    assert replay.status_code in (200, 201) and replay.json()["duplicates"] == [2]
    changed = compactor.post(
        "/api/v1/sessions/run-1/messages",
        {"format": "anthropic", "messages": [{**first, "content": "other"}]},
    )
    assert changed.status_code == 409


def test_nothing_goes_while_the_text_is_younger_shown_or_kept_forever(compactor, compacted):
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 31})
    assert remove_expired_text().messages == 0
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 0})
    assert remove_expired_text().messages == 0
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 7})
    # a session without an archive keeps every text, whatever hides it
    Archive.objects.all().delete()
    assert remove_expired_text().messages == 0
    assert not LogMessage.objects.filter(removed_at__isnull=False).exists()


def test_the_job_is_bounded_and_says_when_there_is_more(compactor, compacted):
    first = remove_expired_text(batch_messages=5)
    assert (first.messages, first.has_more) == (5, True)
    rest = remove_expired_text(batch_messages=100)
    assert (rest.messages, rest.has_more) == (len(HIDDEN) - 5, False)


def test_a_later_archive_holds_the_removed_text_and_the_purge_moves_it_there(compactor, compacted):
    remove_expired_text()
    old = Archive.objects.get()
    before = archived_messages(old)
    compactor.post(
        "/api/v1/sessions/run-1/messages",
        {"format": "anthropic", "messages": tool_transcript(6, first_seq=26, first_round=12)},
    )
    assert compactor.post("/api/v1/sessions/run-1/compact").json()["status"] == "applied"
    newer = Archive.objects.exclude(pk=old.pk).get()
    # the newer archive copies the removed text from the old one, not the emptied log
    assert archived_messages(newer)[: len(before)] == before
    update_policy(profile=compactor.key.profile, values={"archive_retention_days": 1})
    Archive.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=5))
    assert purge_expired_archives() == (1, False)
    assert list(Archive.objects.values_list("pk", flat=True)) == [newer.pk]
    assert set(
        LogMessage.objects.filter(removed_at__isnull=False).values_list("archive_id", flat=True)
    ) == {newer.pk}
    assert _log_page(compactor).count(b'"removed_by_retention"') == 0


def test_an_archive_that_is_the_only_copy_of_a_removed_text_is_never_purged(compactor, compacted):
    remove_expired_text()
    old = Archive.objects.get()
    compactor.post(
        "/api/v1/sessions/run-1/messages",
        {"format": "anthropic", "messages": tool_transcript(6, first_seq=26, first_round=12)},
    )
    compactor.post("/api/v1/sessions/run-1/compact")
    newer = Archive.objects.exclude(pk=old.pk).get()
    # the newer archive lost its copy of seq 2 (another backend, a partial write): the old
    # one is then seq 2's only copy
    ArchiveChunk.objects.filter(archive=newer, seq=2).update(text="{}")
    update_policy(profile=compactor.key.profile, values={"archive_retention_days": 1})
    Archive.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=5))
    assert purge_expired_archives() == (0, False)
    assert Archive.objects.filter(pk=old.pk).exists()
    assert LogMessage.objects.get(seq=2).archive_id == old.pk
    assert LogMessage.objects.get(seq=3).archive_id == newer.pk


def test_a_copy_of_the_same_length_with_other_bytes_keeps_the_messages_text(compactor, compacted):
    # the archive's copy of seq 3 has one character changed in its last part, and seq 4's
    # parts are swapped: the sizes still add up, the bytes do not
    raw = dict(LogMessage.objects.values_list("seq", "raw"))
    archive = Archive.objects.get()
    last = ArchiveChunk.objects.filter(archive=archive, seq=3).order_by("part").last()
    assert last is not None and last.text
    flipped = "x" if last.text[-1] != "x" else "y"
    ArchiveChunk.objects.filter(pk=last.pk).update(text=last.text[:-1] + flipped)
    four = ArchiveChunk.objects.filter(archive=archive, seq=4).order_by("part")
    whole = "".join(four.values_list("text", flat=True))
    four.delete()
    half = len(whole) // 2
    for part, text in enumerate([whole[half:], whole[:half]]):
        ArchiveChunk.objects.create(archive=archive, seq=4, part=part, role="user", text=text)
    assert whole[half:] + whole[:half] != whole
    assert remove_expired_text().messages == len(HIDDEN) - 2
    kept = LogMessage.objects.filter(seq__in=[3, 4])
    assert {m.seq: (m.raw, m.removed_at, m.archive_id) for m in kept} == {
        3: (raw[3], None, None),
        4: (raw[4], None, None),
    }
    # a copy split into parts otherwise than `chunk_text` cuts it is still the same bytes
    four.delete()
    for part, text in enumerate([whole[:half], whole[half:]]):
        ArchiveChunk.objects.create(archive=archive, seq=4, part=part, role="user", text=text)
    assert remove_expired_text().messages == 1
    assert LogMessage.objects.get(seq=4).raw == ""
    assert LogMessage.objects.get(seq=3).raw == raw[3]


def test_a_newer_copy_of_the_same_length_with_other_bytes_is_not_moved_to(compactor, compacted):
    remove_expired_text()
    old = Archive.objects.get()
    compactor.post(
        "/api/v1/sessions/run-1/messages",
        {"format": "anthropic", "messages": tool_transcript(6, first_seq=26, first_round=12)},
    )
    compactor.post("/api/v1/sessions/run-1/compact")
    newer = Archive.objects.exclude(pk=old.pk).get()
    part = ArchiveChunk.objects.filter(archive=newer, seq=2).order_by("part").first()
    assert part is not None and len(part.text) > 1
    ArchiveChunk.objects.filter(pk=part.pk).update(text=part.text[::-1])
    assert part.text[::-1] != part.text
    update_policy(profile=compactor.key.profile, values={"archive_retention_days": 1})
    Archive.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=5))
    assert purge_expired_archives() == (0, False)
    assert LogMessage.objects.get(seq=2).archive_id == old.pk
    assert LogMessage.objects.get(seq=3).archive_id == newer.pk


def test_an_export_holds_the_removed_text_and_its_import_restores_the_log(compactor, compacted):
    raw = dict(LogMessage.objects.values_list("seq", "raw"))
    remove_expired_text()
    exported = "".join(export_lines(sessions_to_export()))
    lines = [json.loads(line) for line in exported.splitlines()]
    logs = [line["row"] for line in lines if line["kind"] == "log"]
    assert {line["seq"]: line["raw"] for line in logs} == raw
    assert all("removed_at" not in line for line in logs)
    LogMessage.objects.all().delete()
    import_lines(io.StringIO(exported))
    assert dict(LogMessage.objects.values_list("seq", "raw")) == raw


def test_log_retention_days_is_validated_naming_the_field_and_served_by_the_policy_api(
    compactor,
):
    with pytest.raises(FieldError, match="log_retention_days"):
        update_policy(profile=compactor.key.profile, values={"log_retention_days": -1})
    with pytest.raises(FieldError, match="log_retention_days"):
        update_policy(profile=compactor.key.profile, values={"log_retention_days": 2.5})
    assert effective_policy(compactor.key.profile).log_retention_days == 0
    assert compactor.get("/api/v1/policy").json()["log_retention_days"] == 0


def test_the_policy_preview_counts_the_texts_a_shorter_log_retention_removes(compactor, compacted):
    profile = compactor.key.profile
    update_policy(profile=profile, values={"log_retention_days": 0})
    preview = policy_impact(profile, {"log_retention_days": 7})
    assert preview is not None and preview.changes_anything
    assert (preview.expiring_texts, preview.expiring_text_sessions) == (len(HIDDEN), 1)
    longer = policy_impact(profile, {"log_retention_days": 31})
    assert longer is not None and longer.expiring_texts == 0
    update_policy(profile=profile, values={"log_retention_days": 7})
    apply_log_retention.apply()  # the beat job, in process
    assert LogMessage.objects.filter(removed_at__isnull=False).count() == preview.expiring_texts
    again = policy_impact(profile, {"log_retention_days": 3})
    assert again is not None and again.expiring_texts == 0  # nothing more goes


def test_the_preview_walks_a_bounded_number_of_sessions_and_then_says_at_least(
    compactor, compacted, client, monkeypatch
):
    body = append_body(12)
    assert compactor.post("/api/v1/sessions/run-2/messages", body).status_code == 201
    assert compactor.post("/api/v1/sessions/run-2/compact").json()["status"] == "applied"
    LogMessage.objects.update(created_at=timezone.now() - timedelta(days=30))
    profile = compactor.key.profile
    update_policy(profile=profile, values={"log_retention_days": 0})
    before = {profile.pk: effective_policy(profile)}
    after = {profile.pk: replace(before[profile.pk], log_retention_days=7)}
    now = timezone.now()
    assert expiring_texts(before, after, now) == ExpiringTexts(2 * len(HIDDEN), 2, False)
    assert expiring_texts(before, after, now, limit=2) == ExpiringTexts(2 * len(HIDDEN), 2, False)
    with CaptureQueriesContext(connection) as one:
        assert expiring_texts(before, after, now, limit=1) == ExpiringTexts(len(HIDDEN), 1, True)
    with CaptureQueriesContext(connection) as none:
        assert expiring_texts(before, after, now, limit=0) == ExpiringTexts(0, 0, True)
    # one candidates query, then the operations and old rows of each walked session (twice
    # when the profile had a retention before; here it had none)
    assert (len(none), len(one)) == (1, 3)
    monkeypatch.setattr(log_retention, "PREVIEW_SESSIONS", 1)
    preview = policy_impact(profile, {"log_retention_days": 7})
    assert preview is not None and preview.changes_anything and preview.expiring_texts_more
    assert (preview.expiring_texts, preview.expiring_text_sessions) == (len(HIDDEN), 1)
    client.force_login(make_user("boss", "admin"))
    page = client.post(
        reverse("policy_profile_preview", args=["default"]), {"log_retention_days": "7"}
    ).content.decode()
    assert f"<strong>at least {len(HIDDEN)} transcript messages</strong> in at least 1 " in page
    assert "the first 1 session with old hidden text only, and there are more" in page
    # none counted in the sessions walked, others not looked at: still a change to confirm
    monkeypatch.setattr(log_retention, "PREVIEW_SESSIONS", 0)
    nothing_yet = policy_impact(profile, {"log_retention_days": 7})
    assert nothing_yet is not None and nothing_yet.changes_anything


def test_the_policy_page_shows_the_texts_a_log_retention_removes_before_saving(
    compactor, compacted, client
):
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 0})
    client.force_login(make_user("boss", "admin"))
    shorter = {"log_retention_days": "7"}
    preview = client.post(reverse("policy_profile_preview", args=["default"]), shorter)
    text = preview.content.decode()
    assert 'id="impact-log-retention"' in text
    assert f"the text of <strong>{len(HIDDEN)} transcript messages</strong> in 1 session " in text
    response = client.post(reverse("policy_profile", args=["default"]), shorter)
    assert "Not saved yet" in response.content.decode()
    assert effective_policy(compactor.key.profile).log_retention_days == 0


def test_the_transcript_viewer_says_where_the_removed_text_is_and_shows_an_earlier_turn_whole(
    compactor, compacted, client
):
    record = {
        "session_id": "run-1",
        "turn": 0,
        "model": "gpt-4o",
        "usage": {"prompt_tokens": 1_000, "completion_tokens": 10},
        "surface_version": 1,  # before the compaction: the removed messages were shown
    }
    assert compactor.post("/api/v1/telemetry", record).status_code in (200, 201, 202)
    remove_expired_text()
    archive = Archive.objects.get()
    client.force_login(make_user("viewer", "viewer"))
    url = reverse("session", args=[compacted.pk])
    headers = {"HX-Request": "true", "HX-Target": "surface"}
    now = client.get(url, headers=headers).content.decode()
    link = f'href="{reverse("archive", args=[archive.pk])}#log-seq-2">archive #{archive.pk}</a>'
    assert f"The text of {len(HIDDEN)} earlier log messages was removed by retention" in now
    assert link in now
    turn = client.get(url, {"surface_turn": "0"}, headers=headers)
    assert turn.status_code == 200
    shown = turn.content.decode()
    assert "part 0 line" in shown  # seq 3's result, read back from the archive
    assert "read back from the archive" in shown


def test_the_job_never_reads_a_messages_text_and_its_queries_do_not_grow_with_the_log(
    compactor, compacted
):
    with CaptureQueriesContext(connection) as queries:
        assert remove_expired_text().messages == len(HIDDEN)
    reads = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("SELECT")]
    for sql in reads:  # the copies are compared in the database; no text comes back
        columns = sql.split(" FROM ")[0].replace('"', " ").lower()
        assert not re.search(r"\b(raw|text)\b", columns), sql[:120]
    # past the policies: the candidates, the operations, the old rows' seq and role, the
    # comparison with the archive, one update, whatever the log's length
    ours = [q["sql"] for q in queries if "telemetry_policy" not in q["sql"]]
    assert len(ours) <= 7, [sql[:80] for sql in ours]


def test_text_before_the_agents_own_cut_goes_too_and_the_surface_keeps_its_bytes(
    compactor, compacted
):
    cut = AgentCompactionOperation(
        keep_from_seq=22, source="claude-code", source_key="line-9", trigger="auto", summary="s"
    )
    CompactionOperation.objects.create(
        session=compacted, base_version=2, position=0, kind="agent", data=cut.to_dict()
    )
    _, _, before = derive(compacted, use_cache=False)
    assert remove_expired_text().messages == len(HIDDEN) + 5  # and seqs 1, 18..21
    removed = LogMessage.objects.filter(removed_at__isnull=False).values_list("seq", flat=True)
    assert sorted(removed) == [1, *HIDDEN, 18, 19, 20, 21]
    _, _, after = derive(compacted, use_cache=False)
    assert canonical_json(after) == canonical_json(before)
    assert LogMessage.objects.get(seq=0).raw  # the system prompt stays shown, with its text


def test_the_policy_form_refuses_a_negative_log_retention_naming_the_field(compactor, client):
    client.force_login(make_user("boss", "admin"))
    response = client.post(
        reverse("policy_profile", args=["default"]), {"log_retention_days": "-1"}
    )
    page = response.content.decode()
    assert response.status_code == 200 and "log_retention_days" in page
    assert "must not be negative" in page
    assert effective_policy(compactor.key.profile).log_retention_days == 0


def test_a_text_no_archive_holds_any_more_is_said_so_never_made_up(compactor, compacted, client):
    remove_expired_text()
    # the archive lost seq 3's parts (a store's fault): no reader may invent the message
    ArchiveChunk.objects.filter(seq=3).delete()
    page = json.loads(_log_page(compactor))
    archive = Archive.objects.get()
    assert page["messages"][3] == {"seq": 3, "removed_by_retention": True, "archive_id": archive.pk}
    assert surface_at(compacted, 1) is None  # version 1 showed seq 3
    assert surface_at(compacted, 2) is not None  # version 2 does not
    # a compaction now cannot archive the whole log: the manual one refuses, nothing changes
    more = {"format": "anthropic", "messages": tool_transcript(6, first_seq=26, first_round=12)}
    compactor.post("/api/v1/sessions/run-1/messages", more)
    refused = compactor.post("/api/v1/sessions/run-1/compact").json()
    assert refused["status"] == "refused" and "log message 3" in refused["reason"]
    assert Archive.objects.count() == 1


def _openai_rounds(rounds: int, first_seq: int, first_round: int) -> list[dict[str, object]]:
    messages: list[dict[str, object]] = []
    seq = first_seq
    for i in range(first_round, first_round + rounds):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}
        messages.append({"seq": seq, "role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"seq": seq + 1, "role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " * 9000}
        )
        seq += 2
    return messages


def test_an_openai_log_keeps_taking_appends_after_its_hidden_text_went(compactor):
    opening = [
        {"seq": 0, "role": "system", "content": "be brief"},
        {"seq": 1, "role": "user", "content": "build it"},
    ]
    body = {"format": "openai", "messages": [*opening, *_openai_rounds(12, 2, 0)]}
    assert compactor.post("/api/v1/sessions/oa/messages", body).status_code == 201
    assert compactor.post("/api/v1/sessions/oa/compact").json()["status"] == "applied"
    LogMessage.objects.update(created_at=timezone.now() - timedelta(days=30))
    update_policy(profile=compactor.key.profile, values={"log_retention_days": 7})
    session = session_of(compactor, "oa")
    page = compactor.get("/api/v1/sessions/oa/log?limit=1000").content
    surface = Surface.objects.get(session=session).body
    assert remove_expired_text().messages > 0
    assert compactor.get("/api/v1/sessions/oa/log?limit=1000").content == page
    _, _, derived = derive(session, use_cache=False)
    assert canonical_json(derived).decode() == surface
    more = {"format": "openai", "messages": _openai_rounds(2, 26, 12)}
    assert compactor.post("/api/v1/sessions/oa/messages", more).status_code == 201
    grown = Surface.objects.get(session=session).body
    assert grown.startswith(surface[: -len("]}")])  # the same prefix, the new rounds after it


def _chunk_reads(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries if re.search(r'FROM "compaction_archivechunk"', q["sql"])]


def test_a_compaction_reads_an_older_archive_only_for_text_log_retention_removed(
    compactor, compacted
):
    """A compaction beside ingest (P7) costs what it did before log retention: its archive
    reads the log's text, and an older archive only for a message whose text went."""
    more = tool_transcript(6, first_seq=26, first_round=12)
    compactor.post("/api/v1/sessions/run-1/messages", {"format": "anthropic", "messages": more})
    with CaptureQueriesContext(connection) as kept:
        assert compactor.post("/api/v1/sessions/run-1/compact").json()["status"] == "applied"
    assert _chunk_reads(kept) == []

    assert remove_expired_text().messages > 0
    more = tool_transcript(6, first_seq=38, first_round=18)
    compactor.post("/api/v1/sessions/run-1/messages", {"format": "anthropic", "messages": more})
    with CaptureQueriesContext(connection) as removed:
        assert compactor.post("/api/v1/sessions/run-1/compact").json()["status"] == "applied"
    assert len(_chunk_reads(removed)) == 1
