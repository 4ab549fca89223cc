"""Codex rollouts imported from the test fixtures come out priced, none of their calls unpriced
(issue 38): the seed catalogue has the Codex models, and their spellings resolve."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from compaction.imports.store import import_file
from telemetry.catalogue import load_catalogue
from telemetry.models import AgentProfile, AgentSession, HourlyUsage, LLMCall
from telemetry.pricing import find_price
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile(make_agent: Any) -> AgentProfile:
    found: AgentProfile = make_agent("codex").key.profile
    return found


@pytest.mark.parametrize(
    ("model", "row"),
    [
        ("gpt-5-codex", "gpt-5-codex"),
        ("gpt-5.1-codex", "gpt-5.1-codex"),
        ("gpt-5.1-codex-max", "gpt-5.1-codex-max"),
        ("gpt-5.1-codex-mini", "gpt-5.1-codex-mini"),
        ("gpt-5.2-codex", "gpt-5.2-codex"),
        ("gpt-5.3-codex", "gpt-5.3-codex"),
        ("codex-mini-latest", "codex-mini-latest"),
        ("gpt-5.2", "gpt-5.2"),
        ("openai/gpt-5-codex", "gpt-5-codex"),
        ("gpt-5.1-codex-2025-11-13", "gpt-5.1-codex"),
    ],
)
def test_a_codex_rollout_imports_priced_whatever_codex_model_it_names(
    profile: AgentProfile, tmp_path: Path, model: str, row: str
) -> None:
    text = fx.codex_rollout()
    assert '"gpt-5-codex"' in text
    path = tmp_path / f"rollout-2026-11-30T11-00-00-{fx.CODEX_SESSION}.jsonl"
    path.write_text(text.replace('"gpt-5-codex"', f'"{model}"'))
    with path.open("rb") as handle:
        report = import_file(profile=profile, path=str(path), handle=handle)
    assert report.calls == len(fx.CODEX_CALLS)
    session = AgentSession.objects.get(profile=profile, external_id=fx.CODEX_SESSION)
    calls = list(LLMCall.objects.filter(session=session))
    assert len(calls) == len(fx.CODEX_CALLS)
    assert all(call.cost_usd is not None and call.cost_usd > 0 for call in calls)
    assert session.unpriced_calls == 0
    assert sum(h.unpriced_calls for h in HourlyUsage.objects.filter(profile=profile)) == 0
    # priced at the row the name resolves to: uncached input, cached input, output
    price = find_price(model, load_catalogue())
    assert price is not None and price.model == row
    expected = sum(
        (
            Decimal(call.uncached_input) * price.input
            + Decimal(call.cache_read) * price.cache_read
            + Decimal(call.output) * price.output
        )
        / 1_000_000
        for call in calls
    )
    assert session.cost_usd == pytest.approx(expected, abs=Decimal("0.000000001"))
