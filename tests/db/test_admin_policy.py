"""The policy admin: a refused save says so and nothing else (issue 17, item 9)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client

from telemetry.models import Policy
from telemetry.policy_store import global_policy
from telemetry.seeding import ensure_defaults

pytestmark = pytest.mark.django_db


def test_a_refused_policy_save_shows_the_error_and_no_success_message():
    ensure_defaults()
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "x" * 20)
    client = Client()
    client.force_login(admin)
    row = Policy.objects.get(is_global=True)
    before = global_policy()
    page = client.get(f"/admin/telemetry/policy/{row.pk}/change/", secure=True)
    form = page.context["adminform"].form
    data = {name: form.initial.get(name, "") for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    if isinstance(data.get("prune_exclude_tools"), list | tuple):
        data["prune_exclude_tools"] = ",".join(data["prune_exclude_tools"])
    # prune above summarize: the policy rules refuse it
    data["prune_threshold"] = "0.95"
    data["summarize_threshold"] = "0.5"
    response = client.post(f"/admin/telemetry/policy/{row.pk}/change/", data, secure=True)
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert response.status_code == 302
    assert response["Location"] == f"/admin/telemetry/policy/{row.pk}/change/"
    assert any(text.startswith("Not saved:") for text in texts), texts
    assert not any("successfully" in text for text in texts), texts
    assert global_policy() == before


def test_the_admin_refuses_a_reserve_at_or_above_a_window_in_use_naming_both():
    from telemetry.models import AgentProfile

    ensure_defaults()
    AgentProfile.objects.filter(name="default").update(window_overrides={"*": 60_000})
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "x" * 20)
    client = Client()
    client.force_login(admin)
    row = Policy.objects.get(is_global=True)
    before = global_policy()
    page = client.get(f"/admin/telemetry/policy/{row.pk}/change/", secure=True)
    form = page.context["adminform"].form
    data = {name: form.initial.get(name, "") for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    data["prune_exclude_tools"] = "[]"  # the JSON field as the admin's form posts it
    data["reserved_output_tokens"] = "120000"
    response = client.post(f"/admin/telemetry/policy/{row.pk}/change/", data, secure=True)
    texts = [str(m) for m in get_messages(response.wsgi_request)]
    assert any(
        "reserve 120,000 ≥ window 60,000 of the profile's default window (*)" in text
        and "(profile default)" in text
        for text in texts
    ), texts
    assert global_policy() == before
