import hashlib
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from telemetry.keys import create_agent_key, find_active_key, revoke_agent_key
from telemetry.models import AgentKey, AgentProfile

pytestmark = pytest.mark.django_db


def test_create_agent_key_command_creates_the_profile_and_prints_the_key_last():
    out = io.StringIO()
    call_command("create_agent_key", "--profile", "night-shift", "--scope", "compact", stdout=out)
    key_text = out.getvalue().strip().splitlines()[-1]
    assert key_text.startswith("clc_")
    key = find_active_key(key_text)
    assert key is not None
    assert key.profile.name == "night-shift"
    assert key.scopes == ["ingest", "compact"]
    assert AgentProfile.objects.filter(name="night-shift").count() == 1


def test_create_agent_key_refuses_a_bad_profile_name():
    with pytest.raises(CommandError, match="profile"):
        call_command("create_agent_key", "--profile", "Bad Name!", stdout=io.StringIO())
    assert not AgentProfile.objects.filter(name="Bad Name!").exists()


def test_keys_are_stored_only_as_a_hash():
    issued = create_agent_key(profile_name="default")
    row = AgentKey.objects.get(pk=issued.key.pk)
    assert issued.plaintext not in (row.key_hash, row.prefix, row.name)
    assert row.key_hash == hashlib.sha256(issued.plaintext.encode()).hexdigest()
    assert issued.plaintext.startswith(f"clc_{row.prefix}_")


def test_request_without_a_key_is_401(client: Client):
    response = client.get("/api/v1/policy")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert "key" in response.json()["detail"]


@pytest.mark.parametrize(
    "header",
    [
        "Bearer clc_000000000000_not-a-real-secret",
        "Bearer garbage",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
    ],
)
def test_request_with_a_bad_key_is_401(client: Client, agent, header):
    response = client.get("/api/v1/policy", headers={"Authorization": header})
    assert response.status_code == 401


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_bearer_scheme_is_case_insensitive(client: Client, agent, scheme):
    """RFC 9110's auth-scheme is case-insensitive (as ninja's HttpBearer reads it)."""
    header = f"{scheme} {agent.plaintext}"
    response = client.get("/api/v1/policy", headers={"Authorization": header})
    assert response.status_code == 200


def test_a_key_with_the_right_prefix_but_wrong_secret_is_401(client: Client, agent):
    forged = f"clc_{agent.key.prefix}_{'x' * 43}"
    response = client.get("/api/v1/policy", headers={"Authorization": f"Bearer {forged}"})
    assert response.status_code == 401


def test_a_revoked_key_stops_working_at_once(agent):
    assert agent.get("/api/v1/policy").status_code == 200
    revoke_agent_key(key_id=agent.key.pk)
    assert agent.get("/api/v1/policy").status_code == 401


def test_revoking_twice_keeps_the_first_revocation_time(agent):
    first = revoke_agent_key(key_id=agent.key.pk).revoked_at
    second = revoke_agent_key(key_id=agent.key.pk).revoked_at
    assert first is not None and first == second


def test_unknown_scope_is_refused():
    with pytest.raises(ValueError, match="scope"):
        create_agent_key(profile_name="default", scopes=["admin"])
