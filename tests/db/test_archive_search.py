"""Archive search that finds code, on PostgreSQL and SQLite alike: every identifier style by its
parts, prefix search, ranking and counts (`compaction.search_terms`)."""

from __future__ import annotations

from typing import Any

import pytest

from compaction.archives import search_archives_counted
from compaction.models import Archive
from telemetry.models import AgentSession
from tests.support import tool_transcript

pytestmark = pytest.mark.django_db

# One distinct identifier per tool result, each in a different style.
CODE = {
    "dotted": "defmodule Acme.Billing.ReviewSessionRegistry do",
    "snake": "see lib/acme/billing/review_session_registry.ex for the fix",
    "camel": "const handler = new InvoiceLedgerCoordinator(config);",
    "path": "error in src/payments/StripeWebhookHandler.ts:42:7",
    "url": "GET https://api.acme.io/v2/customers/PortalAccessToken?expand=owner failed",
    "kebab": "run the settlement-batch-reconciler job again",
}


def coded_rounds(extra: int = 0) -> list[dict[str, Any]]:
    rounds = tool_transcript(len(CODE) + 4 + extra, result_chars=300)
    results = [m for m in rounds if m["role"] == "user" and isinstance(m["content"], list)]
    for message, text in zip(results, CODE.values(), strict=False):
        message["content"][0]["content"] = f"{text}\n" + "filler line\n" * 20
    return rounds


@pytest.fixture
def coded(compactor) -> AgentSession:
    rounds = coded_rounds()
    body = {"format": "anthropic", "system": "You are a build engineer.", "messages": rounds}
    assert compactor.post("/api/v1/sessions/code/messages", body).status_code == 201
    assert compactor.post("/api/v1/sessions/code/compact").json()["status"] == "applied"
    return AgentSession.objects.get(external_id="code")


def hits(compactor, q: str) -> list[dict[str, Any]]:
    response = compactor.get("/api/v1/archives", data={"q": q})
    assert response.status_code == 200, response.content
    found: list[dict[str, Any]] = response.json()
    return found


@pytest.mark.parametrize(
    ("query", "style"),
    [
        ("Registry", "dotted"),
        ("SessionRegistry", "dotted"),
        ("Billing.ReviewSessionRegistry", "dotted"),
        ("review_session_registry", "snake"),
        ("session_registry", "snake"),
        ("LedgerCoordinator", "camel"),
        ("Coordinator", "camel"),
        ("StripeWebhookHandler", "path"),
        ("payments/StripeWebhookHandler.ts", "path"),
        ("WebhookHandler", "path"),
        ("PortalAccessToken", "url"),
        ("api.acme.io", "url"),
        ("AccessToken", "url"),
        ("batch-reconciler", "kebab"),
        ("reconciler", "kebab"),
    ],
)
def test_each_identifier_style_is_found_by_its_parts(compactor, coded, query, style):
    found = hits(compactor, query)
    assert found, query
    texts = [h["snippet"] for h in found]
    assert any(_mentions(text, style) for text in texts), (query, texts)


def _unmarked(snippet: str) -> str:
    return snippet.replace("<mark>", "").replace("</mark>", "")


def _mentions(snippet: str, style: str) -> bool:
    plain = _unmarked(snippet)
    key = {
        "dotted": "Acme.Billing.ReviewSessionRegistry",
        "snake": "review_session_registry.ex",
        "camel": "InvoiceLedgerCoordinator",
        "path": "StripeWebhookHandler.ts",
        "url": "PortalAccessToken",
        "kebab": "settlement-batch-reconciler",
    }[style]
    return key in plain


def test_session_registry_finds_both_the_module_and_the_file(compactor, coded):
    found = hits(compactor, "SessionRegistry")
    plain = " ".join(_unmarked(h["snippet"]) for h in found)
    assert "ReviewSessionRegistry" in plain and "review_session_registry" in plain
    assert any("<mark>" in h["snippet"] for h in found)


def test_prefix_search_finds_every_word_starting_so(compactor, coded):
    found = hits(compactor, "Registr*")
    plain = " ".join(_unmarked(h["snippet"]) for h in found)
    assert "ReviewSessionRegistry" in plain and "review_session_registry" in plain
    assert hits(compactor, "Reconcil*")
    assert hits(compactor, "zebracorn*") == []


def test_results_are_counted_and_ranked(compactor, coded):
    response = compactor.get("/api/v1/archives", data={"q": "filler", "limit": 3})
    assert response["X-Total-Count"] == str(len(CODE))
    assert len(response.json()) == 3
    ranked = search_archives_counted("registry filler", limit=50)
    assert ranked.total == 2
    assert [h.rank for h in ranked.hits] == sorted((h.rank for h in ranked.hits), reverse=True)
    # A chunk that says it twice outranks one that says it once.
    both = search_archives_counted("SessionRegistry OR Coordinator", limit=50)
    assert both.total == 3


def test_a_phrase_an_exclusion_and_syntax_characters(compactor, coded):
    assert hits(compactor, '"nightly build"')
    excluded = hits(compactor, "filler -Registry")
    assert len(excluded) == len(CODE) - 2
    assert hits(compactor, "a'b & c:* | !d ( ) NEAR\"") == []


def test_archives_written_before_the_index_change_are_searchable_after_the_migration(coded):
    from importlib import import_module

    from django.apps import apps

    from compaction.models import ArchiveChunk
    from compaction.search_terms import readable_part

    migration = import_module("compaction.migrations.0004_search_identifier_parts")
    for chunk in ArchiveChunk.objects.all():
        chunk.search = readable_part(chunk.search)
        chunk.save(update_fields=["search"])
    assert search_archives_counted("SessionRegistry").total == 0
    migration.forward(apps, None)
    assert search_archives_counted("SessionRegistry").total == 2
    assert Archive.objects.count() == 1


def test_a_message_in_several_archives_of_its_session_is_one_hit(compactor, coded):
    """Each archive holds the log up to its compaction: after a second compaction the first
    messages are in both archives, and a search lists each message once, from the newest archive
    holding it, saying how many archives hold it (the console's archives page says "also in 1
    earlier archive")."""
    rounds = coded_rounds(extra=3)  # the same log, three rounds longer
    body = {"format": "anthropic", "system": "You are a build engineer.", "messages": rounds}
    assert compactor.post("/api/v1/sessions/code/messages", body).status_code == 201, body
    assert compactor.post("/api/v1/sessions/code/compact").json()["status"] in {"applied", "noop"}
    newest = Archive.objects.order_by("-created_at", "-pk").first()
    assert Archive.objects.count() == 2 and newest is not None

    found = search_archives_counted("SessionRegistry", limit=50)
    assert found.total == 2  # the module and the file: one hit each, not one per archive
    assert {(h.session_id, h.seq) for h in found.hits} == {("code", h.seq) for h in found.hits}
    assert len({h.seq for h in found.hits}) == 2
    assert all(h.archive_id == newest.pk and h.archives == 2 for h in found.hits)
    # every part of a long message and every archive folded: the filler is one hit per message
    filler = search_archives_counted("filler", limit=100)
    assert len({h.seq for h in filler.hits}) == filler.total == len(filler.hits)
    listed = compactor.get("/api/v1/archives", data={"q": "SessionRegistry"}).json()
    assert [h["archives"] for h in listed] == [2, 2]
