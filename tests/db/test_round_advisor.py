"""The D8 advisor on the policy page, from real turns stored through ingest."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.db.conftest import signed_in
from tests.unit.telemetry.test_round_advice import WEEK

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _plain_static(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def week(agent) -> None:
    records = []
    turn = 0
    for rounds, turns in WEEK.items():
        for _ in range(turns):
            for call in range(rounds):
                records.append(
                    {
                        "session_id": f"s-{turn % 7}",
                        "turn": turn,
                        "call": call,
                        "model": "claude-sonnet-4-5",
                        "usage": {"input_tokens": 100, "output_tokens": 10},
                    }
                )
            turn += 1
    for start in range(0, len(records), 1_000):
        response = agent.post("/api/v1/telemetry", {"records": records[start : start + 1_000]})
        body = response.json()
        assert body["created"] == len(records[start : start + 1_000]), [
            i for i in body["items"] if i["status"] != "created"
        ][:3]


def admin() -> Client:
    return signed_in("admin", "advisor-admin")


def row(page: str, profile: str) -> str:
    found = re.search(rf'<tr data-profile="{profile}">(.*?)</tr>', page, re.S)
    assert found, profile
    return re.sub(r"\s+", " ", found.group(1))


def test_golden_the_advisor_counts_turns_nudged_and_stopped_by_current_and_proposed_limits(week):
    client = admin()
    page = client.get(reverse("policy")).content.decode()
    default = row(page, "default")
    assert ">100<" in default  # turns
    assert "3 / 25 / 90 / 140" in default  # p50 / p90 / p99 / max
    assert "101–200: 1" in default
    # current defaults: soft 40 (45×3 + 90 + 140 → 5 nudged), hard 100 (140 → 1 stopped)
    assert "40 / 100 → 5 (5.0 %) / 1 (1.0 %)" in default
    # suggested: soft at p90 = 25, hard at ceil(1.5 × 90) = 135
    assert "25 / 135 → 13 (13.0 %) / 1 (1.0 %)" in default and "suggested" in default
    assert "no turns in 7 days" in row(page, "fleet")

    tried = client.get(reverse("policy"), {"soft": 20, "hard": 50}).content.decode()
    assert "20 / 50 → 13 (13.0 %) / 2 (2.0 %)" in row(tried, "default")


def test_a_bad_proposal_is_refused_naming_the_field(week):
    response = admin().get(reverse("policy"), {"soft": 0, "hard": 10})
    assert response.status_code == 400
    assert "id_soft-error" in response.content.decode()
    response = admin_two().get(reverse("policy"), {"soft": 30, "hard": 10})
    assert response.status_code == 400
    assert "id_hard-error" in response.content.decode()


def admin_two() -> Client:
    return signed_in("admin", "advisor-admin-2")
