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


@pytest.fixture
def coded(compactor) -> AgentSession:
    rounds = tool_transcript(len(CODE) + 4, result_chars=300)
    results = [m for m in rounds if m["role"] == "user" and isinstance(m["content"], list)]
    for message, text in zip(results, CODE.values(), strict=False):
        message["content"][0]["content"] = f"{text}\n" + "filler line\n" * 20
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
