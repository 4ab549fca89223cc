"""Every console table as a download (console.list_exports): the page's filters and order, every
row rather than a page, the page's role, CSV a spreadsheet cannot be tricked by, money exact,
and a list read in keyset chunks while it is written."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compaction.cache_report import session_misses
from compaction.models import Archive, CompactionRun
from console import list_exports
from console.overview import load_overview
from telemetry.catalogue import seed_catalogue
from telemetry.ingest.pipeline import ingest_records
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey, AgentSession, CatalogueModel, ContextEvent
from telemetry.money import money_text

pytestmark = pytest.mark.django_db

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5"


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def viewer(client_as: Callable[[str], Client]) -> Client:
    return client_as("viewer")


@pytest.fixture
def admin(client_as: Callable[[str], Client]) -> Client:
    return client_as("admin")


@pytest.fixture
def key() -> AgentKey:
    seed_catalogue()
    return create_agent_key(profile_name="default").key


def report(key: AgentKey, session_id: str, turns: int = 2, *, model: str = SONNET, **extra: Any):
    records = [
        {
            "session_id": session_id,
            "turn": t,
            "model": model,
            "usage": {
                "input_tokens": 500 + 100 * t,
                "cache_creation_input_tokens": 2_000,
                "cache_read_input_tokens": 20_000,
                "output_tokens": 400,
            },
            **extra,
        }
        for t in range(turns)
    ]
    ingest_records(key=key, raw_items=records, batch=True)
    return AgentSession.objects.get(profile=key.profile, external_id=session_id)


def body(response: Any) -> str:
    assert response.status_code == 200, response
    assert response.streaming
    return b"".join(response.streaming_content).decode("utf-8")


def csv_rows(response: Any) -> list[dict[str, str]]:
    assert response["Content-Type"].startswith("text/csv; charset=utf-8")
    return list(csv.DictReader(io.StringIO(body(response), newline="")))


def json_rows(response: Any) -> list[dict[str, Any]]:
    assert response["Content-Type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in body(response).splitlines()]


# --- the sessions list ---------------------------------------------------------------------------


def test_the_sessions_export_applies_the_lists_filters_and_sort_to_every_page(key, viewer):
    other = create_agent_key(profile_name="fleet").key
    for n in range(30):  # more than a page of the list (25)
        report(key, f"run-{n:02d}", turns=1 + n % 3)
    report(other, "run-fleet", turns=2)
    report(key, "haiku-1", model=HAIKU)

    rows = csv_rows(viewer.get("/sessions/export.csv?profile=default&q=run-&sort=turns&page=2"))
    assert [r["session"] for r in rows] == [
        s.external_id
        for s in AgentSession.objects.filter(
            profile__name="default", external_id__contains="run-"
        ).order_by("turns_count", "-pk")
    ]
    assert len(rows) == 30 and {r["profile"] for r in rows} == {"default"}

    by_model = json_rows(viewer.get(f"/sessions/export.jsonl?model={HAIKU}"))
    assert [r["session"] for r in by_model] == ["haiku-1"]


def test_the_sessions_export_holds_what_the_row_shows_money_exact_and_times_in_utc(key, viewer):
    session = report(key, "exact", turns=3)
    (row,) = json_rows(viewer.get("/sessions/export.jsonl?q=exact"))
    assert row["cost_usd"] == money_text(session.cost_usd)
    assert len(row["cost_usd"].split(".")[1]) == 9
    assert row["turns"] == 3 and row["profile"] == "default" and row["model"] == SONNET
    assert row["pressure_band"] in ("ok", "prune", "compact", "over", "unknown")
    assert row["last_seen_at"] == session.last_seen_at.astimezone(UTC).isoformat()
    (cells,) = csv_rows(viewer.get("/sessions/export.csv?q=exact"))
    assert cells["cost_usd"] == row["cost_usd"] and cells["last_seen_at"] == row["last_seen_at"]


def test_a_session_id_made_to_be_a_formula_is_defused_and_quoting_survives(key, viewer):
    report(key, '=HYPERLINK("evil","x")')
    report(key, 'plain, with "quotes"')
    text = body(viewer.get("/sessions/export.csv?sort=session"))
    assert '"plain, with ""quotes"""' in text
    ids = [r["session"] for r in csv.DictReader(io.StringIO(text, newline=""))]
    assert ids == ['\'=HYPERLINK("evil","x")', 'plain, with "quotes"']
    assert text.split("\r\n")[0].startswith("id,session,pressure_band")
    # JSON keeps the id as it is
    ids = [r["session"] for r in json_rows(viewer.get("/sessions/export.jsonl?sort=session"))]
    assert ids[0] == '=HYPERLINK("evil","x")'


def test_a_large_list_streams_in_keyset_chunks_read_while_it_is_written(key, viewer, monkeypatch):
    monkeypatch.setattr(list_exports, "EXPORT_CHUNK", 4)
    for n in range(10):
        report(key, f"s{n}", turns=1)
    # ties everywhere: the keyset must still visit every session once
    with CaptureQueriesContext(connection) as at_response:
        response = viewer.get("/sessions/export.csv?sort=turns")
    assert response.streaming
    assert not any("telemetry_agentsession" in q["sql"] for q in at_response.captured_queries)
    lines = iter(response.streaming_content)
    with CaptureQueriesContext(connection) as first:
        next(lines), next(lines)  # the header and the first row
    assert sum("telemetry_agentsession" in q["sql"] for q in first.captured_queries) == 1
    with CaptureQueriesContext(connection) as rest:
        remaining = list(lines)
    assert len(remaining) == 9
    # 10 rows in chunks of 4: two more full chunks' reads, then the short one
    assert sum("telemetry_agentsession" in q["sql"] for q in rest.captured_queries) == 2
    rows = list(csv.DictReader(io.StringIO(body(viewer.get("/sessions/export.csv")), newline="")))
    assert sorted(r["session"] for r in rows) == [f"s{n}" for n in range(10)]


def test_exports_need_the_pages_role(key, client_as):
    report(key, "s1")
    anonymous = Client()
    assert anonymous.get("/sessions/export.csv").status_code == 302
    viewer = client_as("viewer")
    assert viewer.get("/catalogue/export.csv").status_code == 403
    assert viewer.get("/keys/export.jsonl").status_code == 403
    assert viewer.get("/sessions/export.pdf").status_code == 404
    assert client_as("admin").get("/keys/export.csv").status_code == 200


def test_a_download_is_an_attachment_never_kept_by_a_shared_cache(key, viewer):
    response = viewer.get("/sessions/export.jsonl")
    assert response["Content-Disposition"].startswith('attachment; filename="sessions-')
    assert response["Content-Disposition"].endswith('.jsonl"')
    assert "no-store" in response["Cache-Control"]


def test_the_sessions_page_links_its_exports_with_its_filters(key, viewer):
    report(key, "s1")
    html = viewer.get("/sessions/?profile=default&sort=cost").content.decode()
    assert 'href="/sessions/export.csv?profile=default&amp;sort=cost"' in html
    assert 'href="/sessions/export.jsonl?profile=default&amp;sort=cost"' in html


# --- spend per profile ---------------------------------------------------------------------------


def test_the_spend_export_is_the_overviews_per_profile_table_for_its_range(key, viewer):
    report(key, "s1", turns=3)
    report(create_agent_key(profile_name="fleet").key, "s2", turns=1)
    found = load_overview("7d")
    rows = json_rows(viewer.get("/overview/export.jsonl?range=7d"))
    assert [r["profile"] for r in rows] == [line.name for line in found.lines]
    by_name = {r["profile"]: r for r in rows}
    for line in found.lines:
        assert by_name[line.name]["cost_usd"] == money_text(line.cost)
        assert by_name[line.name]["calls"] == line.calls
        assert by_name[line.name]["range"] == "7d"
    assert by_name["default"]["calls"] == 3
    html = viewer.get("/?range=7d").content.decode()
    assert 'href="/overview/export.csv?range=7d&amp;tz=UTC"' in html


# --- cache misses --------------------------------------------------------------------------------


def test_a_sessions_cache_misses_export_lists_its_misses_with_premiums(key, viewer):
    t0 = timezone.now() - timedelta(hours=2)

    def call(turn: int, minutes: int, read: int, write: int) -> dict[str, Any]:
        return {
            "session_id": "misses",
            "turn": turn,
            "model": SONNET,
            "at": (t0 + timedelta(minutes=minutes)).isoformat(),
            "usage": {
                "input_tokens": 100,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write,
                "output_tokens": 200,
            },
        }

    records = [call(0, 0, 0, 50_000), call(1, 1, 50_000, 2_000), call(2, 40, 0, 53_000)]
    ingest_records(key=key, raw_items=records, batch=True)
    session = AgentSession.objects.get(external_id="misses")
    misses = session_misses(session).misses
    assert misses
    rows = csv_rows(viewer.get(f"/sessions/{session.pk}/cache/export.csv"))
    assert [(int(r["turn"]), r["cause"]) for r in rows] == [(m.turn, m.cause) for m in misses]
    assert rows[0]["premium_usd"] == money_text(misses[0].premium_usd)
    fleet = json_rows(viewer.get("/cache/export.jsonl"))
    assert [r["profile"] for r in fleet] == ["default"]
    assert Decimal(fleet[0]["premium_usd"]) == sum(m.premium_usd or 0 for m in misses)
    fragment = viewer.get(f"/sessions/{session.pk}/cache", headers={"HX-Request": "true"})
    assert f'href="/sessions/{session.pk}/cache/export.csv"' in fragment.content.decode()


# --- compaction history --------------------------------------------------------------------------


def test_the_compaction_export_is_the_whole_history_oldest_first_in_chunks(
    key, viewer, monkeypatch
):
    monkeypatch.setattr(list_exports, "EXPORT_CHUNK", 2)
    session = report(key, "compacted")
    at = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    for n in range(3):
        run = CompactionRun.objects.create(
            session=session,
            mode="auto",
            status="applied",
            action="prune",
            reason=f"-reason {n}",
            tokens_before=90_000,
            tokens_after=40_000,
        )
        CompactionRun.objects.filter(pk=run.pk).update(started_at=at + timedelta(minutes=n))
        ContextEvent.objects.create(
            session=session,
            kind="compaction",
            origin="agent",
            source="claude-code",
            source_key=f"k{n}",
            summary=f"summary {n}",
            at=at + timedelta(minutes=n),
        )
    rows = csv_rows(viewer.get(f"/sessions/{session.pk}/runs/export.csv"))
    assert [(r["origin"], r["reason"]) for r in rows] == [
        (origin, text)
        for n in range(3)
        for origin, text in (("auto", f"'-reason {n}"), ("agent", f"summary {n}"))
    ]
    assert rows[0]["at"] == "2026-03-01T10:00:00+00:00" and rows[0]["tokens_after"] == "40000"


# --- archives, the catalogue, keys ---------------------------------------------------------------


def test_the_archives_export_is_every_archive_or_one_sessions(key, viewer, monkeypatch):
    monkeypatch.setattr(list_exports, "EXPORT_CHUNK", 2)
    first, second = report(key, "a1"), report(key, "a2")
    for n, session in enumerate([first, second, first, first, second]):
        Archive.objects.create(
            session=session,
            namespace="ns",
            log_messages=n + 1,
            surface_version=n,
            surface="[]",
            format="anthropic",
            chars=10 * n,
        )
    everything = json_rows(viewer.get("/archives/export.jsonl"))
    assert [r["id"] for r in everything] == list(
        Archive.objects.order_by("-created_at", "-pk").values_list("pk", flat=True)
    )
    only_first = json_rows(viewer.get(f"/archives/export.jsonl?session={first.pk}"))
    assert {r["session"] for r in only_first} == {"a1"} and len(only_first) == 3


def test_the_catalogue_export_keeps_prices_exact(admin):
    seed_catalogue()
    rows = csv_rows(admin.get("/catalogue/export.csv"))
    stored = list(CatalogueModel.objects.order_by("provider", "model"))
    assert [r["model"] for r in rows] == [m.model for m in stored]
    assert rows[0]["input_usd_per_mtok"] == f"{stored[0].input:f}"


def test_the_keys_export_names_keys_by_prefix_and_never_holds_a_secret(admin):
    issued = create_agent_key(profile_name="default", scopes=["compact"], name="ci")
    text = body(admin.get("/keys/export.jsonl"))
    assert issued.plaintext not in text and issued.key.key_hash not in text
    (row,) = [json.loads(line) for line in text.splitlines()]
    assert row["key"] == f"clc_{issued.key.prefix}_…"
    assert row["scopes"] == issued.key.scopes and "compact" in row["scopes"]
    assert row["name"] == "ci" and row["revoked_at"] is None
    assert "key_hash" not in row
