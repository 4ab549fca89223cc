"""Sign-in throttling (issue 16 item 6): by account and by address, console and admin alike."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple 42"


@pytest.fixture(autouse=True)
def _fresh_counts(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def operator():
    return get_user_model().objects.create_superuser("ops", "ops@example.com", PASSWORD)


def sign_in(client: Client, path: str, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        path, {"username": username, "password": password}, REMOTE_ADDR=address, follow=False
    )


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_after_five_wrong_passwords_even_the_right_one_is_refused_with_a_clear_message(
    operator, path, settings
):
    client = Client()
    for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT):
        assert sign_in(client, path, "ops", "wrong").status_code == 200
    response = sign_in(client, path, "OPS", PASSWORD, address="10.0.0.2")  # any case, any address
    assert response.status_code == 200
    assert "_auth_user_id" not in client.session
    assert "Too many failed sign-ins for this account" in response.content.decode()


def test_many_failures_from_one_address_lock_that_address_not_others(operator, settings):
    client = Client()
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        sign_in(client, "/accounts/login/", f"guess-{i}", "wrong", address="10.9.9.9")
    refused = sign_in(client, "/accounts/login/", "ops", PASSWORD, address="10.9.9.9")
    assert "Too many failed sign-ins for your address" in refused.content.decode()
    elsewhere = Client()
    ok = sign_in(elsewhere, "/accounts/login/", "ops", PASSWORD, address="10.1.1.1")
    assert ok.status_code == 302 and "_auth_user_id" in elsewhere.session


def test_a_success_below_the_limit_clears_the_account_count(operator, settings):
    client = Client()
    for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT - 1):
        sign_in(client, "/accounts/login/", "ops", "wrong", address="10.0.0.3")
    assert (
        sign_in(client, "/accounts/login/", "ops", PASSWORD, address="10.0.0.4").status_code == 302
    )
    client.logout()
    for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT - 1):
        sign_in(client, "/accounts/login/", "ops", "wrong", address="10.0.0.5")
    assert (
        sign_in(client, "/accounts/login/", "ops", PASSWORD, address="10.0.0.6").status_code == 302
    )
