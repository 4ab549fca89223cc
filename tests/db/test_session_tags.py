"""Operators' tags, the list's tag and range filters, saved views, and the read API's names
(issue 39 item 2): each through the console as an operator uses it, on PostgreSQL and SQLite."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from auditlog.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from compaction.imports.store import import_file
from compaction.models import TranscriptImport
from console.models import SavedView
from telemetry.models import AgentSession, SessionTag
from telemetry.session_tags import add_tags
from telemetry.tag_rules import MAX_TAGS_PER_SESSION
from tests.db.test_console_views import _plain_static, make_session
from tests.unit.imports import fixtures as fx

__all__ = ["_plain_static"]  # a fixture this module uses

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def fleet(agent: Any) -> dict[str, AgentSession]:
    """Three sessions of rising cost and turns; the middle one named by its agent."""
    small = make_session(agent.key, "small", turns=1)
    middle = make_session(agent.key, "middle", turns=3, metadata={"title": "Fix the build"})
    big = make_session(agent.key, "big", turns=6)
    return {"small": small, "middle": middle, "big": big}


def listed(client: Any, query: str) -> set[str]:
    """The external ids the sessions export holds for the list's `query` (the page's rows)."""
    response = client.get(f"/sessions/export.jsonl?{query}")
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    return {json.loads(line)["session"] for line in body.splitlines() if line}


def test_an_operator_adds_and_removes_tags_in_place_and_the_audit_says_who(fleet, client_as):
    operator = client_as("operator")
    session = fleet["middle"]
    url = reverse("session_tags", args=[session.pk])
    response = operator.post(url, {"tags": "Needs Review, billing"}, headers=HTMX)
    assert response.status_code == 200
    assert 'id="session-tags"' in response.text and "needs-review" in response.text
    again = operator.post(url, {"tags": "billing"}, headers=HTMX)  # a repeat changes nothing
    assert again.status_code == 200
    assert sorted(SessionTag.objects.values_list("tag", flat=True)) == ["billing", "needs-review"]
    entry = LogEntry.objects.get_for_model(SessionTag).filter(action=LogEntry.Action.CREATE)
    assert entry.count() == 2
    operator_user = User.objects.order_by("pk").last()
    assert operator_user is not None
    assert {e.actor.username for e in entry if e.actor} == {operator_user.username}
    # shown on the page and in the list's row, each a link to the list filtered by it
    page = operator.get(reverse("session", args=[session.pk])).text
    assert 'href="/sessions/?tag=needs-review"' in page
    assert 'class="tag" href="?tag=billing"' in operator.get("/sessions/").text
    removed = operator.post(
        reverse("session_tag_remove", args=[session.pk]), {"tag": "billing"}, headers=HTMX
    )
    assert removed.status_code == 200 and ">billing</a>" not in removed.text
    assert list(SessionTag.objects.values_list("tag", flat=True)) == ["needs-review"]
    assert LogEntry.objects.get_for_model(SessionTag).filter(action=LogEntry.Action.DELETE)
    audit = client_as("superuser").get("/audit/?type=tag").text  # the admins' audit page
    assert "billing on session" in audit and operator_user.username in audit


def test_a_bad_tag_or_one_too_many_answers_422_naming_the_field_and_keeps_what_was_there(
    fleet, client_as
):
    operator = client_as("operator")
    session = fleet["small"]
    url = reverse("session_tags", args=[session.pk])
    add_tags(session_id=session.pk, texts=[",".join(f"t{i}" for i in range(MAX_TAGS_PER_SESSION))])
    full = operator.post(url, {"tags": "one-more"}, headers=HTMX)  # shown in place
    assert full.status_code == 200
    assert "tags: a session holds at most 20 tags" in full.text
    assert 'aria-invalid="true"' in full.text and 'value="one-more"' in full.text
    bad = operator.post(url, {"tags": "ok, <script>"})  # without JavaScript: a page of its own
    assert bad.status_code == 422 and "tags:" in bad.text and "&lt;script&gt;" in bad.text
    assert SessionTag.objects.filter(session=session).count() == MAX_TAGS_PER_SESSION


def test_viewers_see_tags_but_cannot_change_them(fleet, client_as):
    viewer = client_as("viewer")
    session = fleet["small"]
    add_tags(session_id=session.pk, texts=["kept"])
    page = viewer.get(reverse("session", args=[session.pk])).text
    assert "kept" in page and 'name="tags"' not in page
    assert viewer.post(reverse("session_tags", args=[session.pk]), {"tags": "x"}).status_code == 403
    remove = viewer.post(reverse("session_tag_remove", args=[session.pk]), {"tag": "kept"})
    assert remove.status_code == 403
    assert list(SessionTag.objects.values_list("tag", flat=True)) == ["kept"]


def test_the_page_export_and_api_apply_the_same_tag_and_range_filters(fleet, agent, client_as):
    viewer = client_as("viewer")
    add_tags(session_id=fleet["small"].pk, texts=["red"])
    add_tags(session_id=fleet["big"].pk, texts=["blue", "red"])
    middle_cost = fleet["middle"].cost_usd
    cases = {
        "tag=red": {"small", "big"},
        "tag=blue&tag=nothing": {"big"},
        f"cost_min={middle_cost}": {"middle", "big"},
        f"cost_max={middle_cost}": {"small", "middle"},
        "turns_min=2&turns_max=3": {"middle"},
        "tag=red&turns_min=2": {"big"},
    }
    export = viewer.get("/sessions/export.jsonl?tag=blue")
    (line,) = b"".join(export.streaming_content).decode().splitlines()
    assert json.loads(line)["tags"] == ["blue", "red"]  # the export carries the tags too
    for query, expected in cases.items():
        assert listed(viewer, query) == expected, query
        api = agent.get(f"/api/v1/sessions?{query}").json()
        assert "sessions" in api, (query, api)
        assert {s["session_id"] for s in api["sessions"]} == expected, query
        page = viewer.get(f"/sessions/?{query}").text
        assert all(f">{name}<" in page for name in expected if name != "middle"), query


def test_a_bad_filter_is_a_422_naming_it_in_the_api_and_a_notice_on_the_page(
    fleet, agent, client_as
):
    response = agent.get("/api/v1/sessions?cost_min=2&cost_max=1")
    assert response.status_code == 422
    assert response.json()["field"] == "cost_max"
    assert agent.get("/api/v1/sessions?turns_min=1.5").json()["field"] == "turns_min"
    assert agent.get("/api/v1/sessions?tag=-x").json()["field"] == "tag"
    page = client_as("viewer").get("/sessions/?cost_min=2&cost_max=1")
    assert page.status_code == 200
    assert "Ignored <strong>cost_max</strong>: must be at least cost_min (2)" in page.text


def test_the_read_api_gives_each_session_its_title_metadata_and_tags(fleet, agent):
    add_tags(session_id=fleet["middle"].pk, texts=["b, a"])
    item = next(
        s for s in agent.get("/api/v1/sessions").json()["sessions"] if s["session_id"] == "middle"
    )
    assert item["title"] == "Fix the build" and item["tags"] == ["a", "b"]
    assert item["metadata"]["title"] == "Fix the build"
    detail = agent.get("/api/v1/sessions/middle?series_limit=0").json()
    assert (detail["title"], detail["tags"]) == ("Fix the build", ["a", "b"])
    assert agent.get("/api/v1/sessions/small?series_limit=0").json()["tags"] == []


def test_bulk_tagging_tags_what_the_filters_select_and_refuses_an_unfiltered_list(fleet, client_as):
    operator = client_as("operator")
    url = reverse("sessions_tag_bulk")
    done = operator.post(url, {"query": "turns_min=2", "tags": "review"})
    assert done.status_code == 302 and done["Location"] == "/sessions/?turns_min=2"
    assert set(SessionTag.objects.values_list("session__external_id", flat=True)) == {
        "middle",
        "big",
    }
    unfiltered = operator.post(url, {"query": "sort=-cost", "tags": "all"})
    assert unfiltered.status_code == 422 and "query" in unfiltered.text
    bad = operator.post(url, {"query": "turns_min=2", "tags": "-bad"})
    assert bad.status_code == 422 and "tags" in bad.text
    assert client_as("viewer").post(url, {"query": "q=big", "tags": "x"}).status_code == 403
    assert SessionTag.objects.count() == 2


def test_saved_views_are_each_users_own_named_renamed_and_deleted(fleet, client_as):
    ana, bob = client_as("viewer"), client_as("operator")
    saved = ana.post(
        reverse("saved_view_save"), {"name": " Busy  ones ", "query": "turns_min=2&page=3"}
    )
    assert saved.status_code == 302 and saved["Location"] == "/sessions/?turns_min=2"
    view = SavedView.objects.get()
    assert (view.name, view.query) == ("Busy ones", "turns_min=2")
    # saving the same name again replaces its query (a double submission changes nothing)
    ana.post(reverse("saved_view_save"), {"name": "Busy ones", "query": "turns_min=3"})
    assert SavedView.objects.get().query == "turns_min=3"
    page = ana.get("/sessions/").text
    assert 'href="/sessions/?turns_min=3" class="view-link">Busy ones</a>' in page
    assert "Busy ones" not in bob.get("/sessions/").text
    # another user's view is no view of theirs: nothing renamed, nothing deleted
    rename = reverse("saved_view_rename", args=[view.pk])
    assert bob.post(rename, {"name": "mine"}).status_code == 404
    bob.post(reverse("saved_view_delete", args=[view.pk]))
    assert SavedView.objects.filter(pk=view.pk).exists()
    ana.post(reverse("saved_view_save"), {"name": "Other", "query": "q=x"})
    clash = ana.post(rename, {"name": "other"})  # names compare as typed
    assert clash.status_code == 302
    taken = ana.post(rename, {"name": "Other"})
    assert taken.status_code == 409 and "name" in taken.text and "Other" in taken.text
    empty = ana.post(reverse("saved_view_save"), {"name": "  ", "query": "q=x"})
    assert empty.status_code == 422 and "name" in empty.text
    ana.post(reverse("saved_view_delete", args=[view.pk]))
    assert list(SavedView.objects.values_list("name", flat=True)) == ["Other"]


def test_a_console_operator_sets_tags_through_the_api_and_an_agent_key_cannot(
    fleet, agent, client_as
):
    url = "/api/v1/profiles/default/sessions/middle/tags"
    body = json.dumps({"tags": ["Release 2", "qa"]})
    operator = client_as("operator", enforce_csrf=True)
    operator.get("/sessions/")  # the page sets the CSRF cookie, as a browser holds it
    token = operator.cookies["csrftoken"].value
    put = operator.put(url, body, content_type="application/json", headers={"X-CSRFToken": token})
    assert put.status_code == 200, put.content
    assert put.json() == {"profile": "default", "session_id": "middle", "tags": ["qa", "release-2"]}
    assert operator.put(url, body, content_type="application/json").status_code == 403  # no token
    bad = operator.put(
        url,
        json.dumps({"tags": ["ok", "-x"]}),
        content_type="application/json",
        headers={"X-CSRFToken": token},
    )
    assert bad.status_code == 422 and bad.json()["field"] == "tags"
    assert (
        agent.client.put(
            url, body, content_type="application/json", headers=agent.headers()
        ).status_code
        == 401
    )
    viewer = client_as("viewer")
    assert viewer.put(url, body, content_type="application/json").status_code == 403
    assert agent.get("/api/v1/sessions/middle?series_limit=0").json()["tags"] == ["qa", "release-2"]


def test_backfill_gives_imported_sessions_the_metadata_their_files_hold_once(make_agent, tmp_path):
    profile = make_agent("imports").key.profile
    for name, text in (
        (f"{fx.NAMED_SESSION}.jsonl", fx.claude_code_named_session()),
        ("rollout-2026-11-30T10-00-00.jsonl", fx.codex_rollout()),
    ):
        path = tmp_path / name
        path.write_text(text)
        with path.open("rb") as handle:
            import_file(profile=profile, path=str(path), handle=handle)
    kept = {s.pk: (s.metadata, s.title, s.git_branch) for s in AgentSession.objects.all()}
    # as a session imported before metadata was kept: nothing of it
    AgentSession.objects.update(metadata={}, metadata_doors={}, title="", git_branch="")
    # a third import whose file is gone
    gone = TranscriptImport.objects.first()
    assert gone is not None
    TranscriptImport.objects.create(
        profile=profile, path=str(tmp_path / "gone.jsonl"), format="codex", session=gone.session
    )
    out = io.StringIO()
    call_command("backfill_session_meta", "--dry-run", stdout=out)
    assert "2 sessions given metadata" in out.getvalue() and "1 no longer on disk" in out.getvalue()
    assert not AgentSession.objects.exclude(metadata={}).exists()  # a dry run changes nothing
    call_command("backfill_session_meta", "--batch", "1", stdout=out)
    assert {s.pk: (s.metadata, s.title, s.git_branch) for s in AgentSession.objects.all()} == kept
    again = io.StringIO()
    call_command("backfill_session_meta", stdout=again)
    assert "0 sessions given metadata" in again.getvalue()
