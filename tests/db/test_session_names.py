"""Session metadata and titles through every door (issue 39): JSON records, OTLP spans and
logs' resources, Claude Code transcripts and Codex rollouts; the list's search and its
multi-select metadata filters. On PostgreSQL and SQLite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from compaction.imports.store import import_file
from telemetry.models import AgentSession
from tests.db.conftest import signed_in
from tests.db.test_otlp import DONE_WHEN, T0, TRACES, pb_span, pb_traces, post
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 10}


def record(session: str, turn: int = 0, **extra: Any) -> dict[str, Any]:
    return {"session_id": session, "turn": turn, "model": SONNET, "usage": USAGE, **extra}


def stored(external_id: str) -> AgentSession:
    return AgentSession.objects.get(external_id=external_id)


def test_a_json_record_metadata_is_stored_and_a_replay_with_other_metadata_is_a_duplicate(agent):
    meta = {"title": "Refactor the\nbilling job", "user": "ana", "repository": "acme/billing"}
    first = agent.post("/api/v1/telemetry", record("rec-1", metadata=meta))
    assert first.status_code == 201, first.content
    again = agent.post("/api/v1/telemetry", record("rec-1", metadata={"user": "bob"}))
    assert again.json()["items"][0]["status"] == "duplicate"
    session = stored("rec-1")
    assert session.title == "Refactor the billing job"
    # the record door is the most specific, but the first writer of a key wins within it
    assert (session.meta_user, session.repository) == ("ana", "acme/billing")
    assert session.metadata["user"] == "ana" and session.metadata_doors["user"] == "record"


def test_a_bad_metadata_object_is_refused_naming_the_field(agent):
    response = agent.post("/api/v1/telemetry", record("rec-2", metadata={"tags": ["a", "b"]}))
    assert response.status_code == 422
    payload = response.json()
    named = payload.get("field") or payload.get("items", [{}])[0].get("field") or ""
    assert named.startswith("metadata"), payload
    assert "string or a number" in str(payload)
    assert not AgentSession.objects.filter(external_id="rec-2", calls_count__gt=0).exists()


def test_otlp_span_and_resource_attributes_name_the_user_repository_branch_and_agent(make_agent):
    agent = make_agent()
    resource = {
        "service.name": "billing-agent",
        "service.version": "1.4.2",
        "vcs.repository.url.full": "https://github.com/acme/billing",
        "vcs.ref.head.name": "main",
    }
    body = pb_traces(pb_span({**DONE_WHEN, "user.id": "ana@acme.test"}), resource=resource)
    assert post(agent, TRACES, body).status_code == 200
    session = stored("s1")
    assert (session.meta_user, session.agent_name, session.agent_version) == (
        "ana@acme.test",
        "billing-agent",
        "1.4.2",
    )
    assert (session.repository, session.git_branch) == ("https://github.com/acme/billing", "main")
    assert session.metadata_doors["branch"] == "otlp"
    # a record naming another branch is more specific than the OTLP resource
    agent.post("/api/v1/telemetry", record("s1", turn=5, metadata={"branch": "release"}))
    assert stored("s1").git_branch == "release"


@pytest.mark.parametrize("new", [3, 12])  # the figures' UPDATE as a VALUES list, as arrays
def test_an_exports_metadata_is_written_with_its_sessions_figures(make_agent, monkeypatch, new):
    """An export's new sessions, beside a stored one whose metadata it leaves as it was, end
    with the metadata their spans and resource named, the stored one with its own. On
    PostgreSQL the batch writer sets it in the sessions' figures UPDATE: no statement of its
    own (`session_state.figures_statement`)."""
    from django.db import connection

    from telemetry import session_state

    agent = make_agent()
    old = {**DONE_WHEN, "gen_ai.conversation.id": "m-old", "user.id": "ana"}
    first = pb_traces(pb_span(old, span="b" * 16), resource={"service.name": "old-agent"})
    assert post(agent, TRACES, first).status_code == 200
    before = stored("m-old")
    writes: list[list[int]] = []
    write = session_state.write_metadata

    def counted(pks: list[int], values: dict[str, Any]) -> None:
        writes.append(pks)
        write(pks, values)

    monkeypatch.setattr(session_state, "write_metadata", counted)
    spans = [
        pb_span(
            {**DONE_WHEN, "gen_ai.conversation.id": f"m-{n}", "user.id": f"u{n}"},
            span=f"{n + 1:016x}",
        )
        for n in range(new)
    ]
    spans.append(pb_span(old, span="c" * 16, start=T0 + 5_000_000_000))
    body = pb_traces(*spans, resource={"service.name": "billing-agent"})
    assert post(agent, TRACES, body).status_code == 200
    for n in range(new):
        session = stored(f"m-{n}")
        assert session.metadata == {"user": f"u{n}", "agent": "billing-agent"}
        assert session.metadata_doors == {"user": "otlp", "agent": "otlp"}
        assert (session.meta_user, session.agent_name) == (f"u{n}", "billing-agent")
        assert session.calls_count == 1
    after = stored("m-old")
    assert (after.metadata, after.metadata_doors) == (before.metadata, before.metadata_doors)
    assert (after.meta_user, after.agent_name) == ("ana", "old-agent")
    assert after.calls_count == 2
    if connection.vendor == "postgresql":
        assert writes == []


def _import(profile, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with path.open("rb") as handle:
        import_file(profile=profile, path=str(path), handle=handle)


def test_a_claude_code_transcript_names_its_session(make_agent, tmp_path):
    profile = make_agent("imports").key.profile
    _import(profile, tmp_path, f"{fx.NAMED_SESSION}.jsonl", fx.claude_code_named_session())
    session = stored(fx.NAMED_SESSION)
    assert session.title == "Checkout coupons"
    assert session.metadata["first_prompt"].startswith("Add a coupon field to the checkout")
    assert (session.repository, session.git_branch) == ("/home/dev/src/shop", "feature/checkout")
    assert (session.agent_name, session.agent_version) == ("claude-code", "2.0.31")
    assert session.metadata["entrypoint"] == "cli"
    # importing the file again changes nothing
    before = (session.metadata, session.metadata_doors)
    _import(profile, tmp_path, f"{fx.NAMED_SESSION}.jsonl", fx.claude_code_named_session())
    again = stored(fx.NAMED_SESSION)
    assert (again.metadata, again.metadata_doors) == before


def test_a_codex_rollout_names_its_session_by_its_first_prompt(make_agent, tmp_path):
    profile = make_agent("imports").key.profile
    _import(profile, tmp_path, "rollout-2026-11-30T10-00-00.jsonl", fx.codex_rollout())
    session = stored(fx.CODEX_SESSION)
    assert session.title == "fix the tests"
    assert (session.repository, session.git_branch) == ("git@github.com:acme/app.git", "fix/tests")
    assert (session.agent_name, session.agent_version) == ("codex", "0.63.0")
    assert session.metadata["cwd"] == "/work/app"


@pytest.fixture
def named(agent):
    for sid, meta in (
        ("n-1", {"title": "Checkout coupons", "user": "ana", "branch": "main", "agent": "cc"}),
        ("n-2", {"title": "Billing retries", "user": "bob", "branch": "dev", "agent": "cc"}),
        ("n-3", {"title": "Search ranking", "user": "cy", "branch": "main", "agent": "codex"}),
    ):
        assert agent.post("/api/v1/telemetry", record(sid, metadata=meta)).status_code == 201


def _listed(client: Client, query: str) -> list[str]:
    html = client.get(reverse("sessions") + query).content.decode()
    return sorted(sid for sid in ("n-1", "n-2", "n-3") if f">{sid}<" in html)


def test_the_list_shows_titles_searches_them_and_filters_on_several_values(named):
    client = signed_in("viewer", "viewer-1")
    page = client.get(reverse("sessions")).content.decode()
    assert "Checkout coupons" in page and ">n-1<" in page
    assert 'name="user" multiple' in page and '<option value="bob"' in page
    assert _listed(client, "?q=coupon") == ["n-1"]
    assert _listed(client, "?user=ana&user=cy") == ["n-1", "n-3"]
    assert _listed(client, "?branch=main&agent=cc") == ["n-1"]
    assert _listed(client, "?user=nobody") == []
    chosen = client.get(reverse("sessions") + "?user=ana&user=cy").content.decode()
    assert '<option value="ana" selected>' in chosen and '<option value="cy" selected>' in chosen


def test_the_session_page_shows_the_title_the_id_and_metadata_linked_to_the_list(named):
    client = signed_in("viewer", "viewer-2")
    session = stored("n-2")
    page = client.get(reverse("session", args=[session.pk])).content.decode()
    assert "Billing retries" in page and "n-2" in page
    assert f"{reverse('sessions')}?user=bob" in page
    assert f"{reverse('sessions')}?branch=dev" in page


def test_the_metadata_write_stores_what_the_orms_update_stores(make_agent):
    """`write_metadata` (one fixed statement on PostgreSQL) leaves the rows it names as the
    ORM's `update` leaves them: JSON and text with quotes, backslashes and non-ASCII, an empty
    column; a session it does not name is untouched."""
    from telemetry.session_meta import columns
    from telemetry.session_state import write_metadata

    profile = make_agent().key.profile
    a, b, orm, other = (
        AgentSession.objects.create(profile=profile, external_id=f"wm-{n}")
        for n in ("a", "b", "orm", "other")
    )
    metadata = {
        "agent": 'svc\'s "billing" \\ agent',
        "title": "Réparer ✓ the\tjob",
        "user": "ana",
        "branch": "x" * 300,
        "custom.key": '{"not": "json"}',
    }
    doors = dict.fromkeys(metadata, "otlp")
    values = {"metadata": metadata, "metadata_doors": doors, **columns(metadata)}
    assert values["repository"] == ""
    write_metadata([a.pk, b.pk], values)
    AgentSession.objects.filter(pk=orm.pk).update(**values)
    names = ["metadata", "metadata_doors", *columns({})]
    rows = {
        s.external_id: [getattr(s, name) for name in names]
        for s in AgentSession.objects.filter(profile=profile)
    }
    assert rows["wm-a"] == rows["wm-b"] == rows["wm-orm"]
    assert rows["wm-a"][0] == metadata and rows["wm-a"][2:] == list(columns(metadata).values())
    assert rows["wm-other"] == [{}, {}, "", "", "", "", "", ""]


def test_the_metadata_write_reads_the_rows_it_names_however_the_table_grew(make_agent):
    """`write_metadata` on one connection while the sessions table grows reads only the rows it
    names: its statement is planned for its ids each time. Prepared, the plan the connection
    kept from when the table was small (a scan of every session) ran on every export after."""
    from django.db import connection

    from telemetry.session_meta import columns
    from telemetry.session_state import write_metadata

    if connection.vendor != "postgresql":
        pytest.skip("the statement and the statistics are PostgreSQL's")
    profile = make_agent().key.profile
    a, b = (AgentSession.objects.create(profile=profile, external_id=f"wg-{n}") for n in "ab")
    metadata = {"agent": "billing"}
    values = {"metadata": metadata, "metadata_doors": {"agent": "otlp"}, **columns(metadata)}
    for _ in range(8):  # past PostgreSQL's five custom plans, after which it may keep one
        write_metadata([a.pk, b.pk], values)
    AgentSession.objects.bulk_create(
        [AgentSession(profile=profile, external_id=f"wg-many-{i}") for i in range(30_000)]
    )

    def rows_read() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT seq_tup_read + idx_tup_fetch FROM pg_stat_xact_user_tables "
                "WHERE relname = %s",
                [AgentSession._meta.db_table],
            )
            return int(cursor.fetchone()[0])

    before = rows_read()
    write_metadata([a.pk, b.pk], values)
    assert rows_read() - before <= 10
    assert AgentSession.objects.get(pk=b.pk).agent_name == "billing"
