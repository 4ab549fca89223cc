"""Sign-in throttling (console.limits, django-axes): per client address and account together,
console and admin alike; nobody elsewhere can lock an account out, the proxy setting gives each
client its own count, and parallel guesses never get past the limit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple 42"
PATHS = ["/accounts/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def _fast_hashes(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator():
    return get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)


def sign_in(
    client: Client,
    path: str,
    username: str,
    password: str,
    address: str = "10.0.0.1",
    **extra: Any,
):
    return client.post(
        path, {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@pytest.mark.parametrize("path", PATHS)
def test_past_the_limit_even_the_right_password_is_refused_from_that_address_with_429(
    operator, path, settings
):
    client = Client()
    codes = [
        sign_in(client, path, "admin", "wrong").status_code
        for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT)
    ]
    assert codes == [200] * (settings.LOGIN_FAILURES_PER_ACCOUNT - 1) + [429]
    refused = sign_in(client, path, "ADMIN", PASSWORD)  # any case
    assert refused.status_code == 429 and not signed_in(client)
    assert refused["Retry-After"] == str(settings.LOGIN_LOCKOUT_SECONDS)
    page = refused.content.decode()
    assert "Too many failed sign-ins from your address" in page
    assert 'name="password"' in page  # the login page itself, not a foreign one


@pytest.mark.parametrize("path", PATHS)
def test_a_stranger_with_ten_wrong_passwords_does_not_stop_admin_signing_in_elsewhere(
    operator, path
):
    stranger = Client()
    for _ in range(10):
        sign_in(stranger, path, "admin", "wrong", address="203.0.113.66")
    owner = Client()
    response = sign_in(owner, path, "admin", PASSWORD, address="198.51.100.7")
    assert response.status_code == 302 and signed_in(owner)


def test_many_failures_from_one_address_lock_that_address_not_others(operator, settings):
    client = Client()
    for i in range(settings.LOGIN_FAILURES_PER_ADDRESS):
        sign_in(client, "/accounts/login/", f"guess-{i}", "wrong", address="10.9.9.9")
    refused = sign_in(client, "/accounts/login/", "admin", PASSWORD, address="10.9.9.9")
    assert refused.status_code == 429 and not signed_in(client)
    elsewhere = Client()
    ok = sign_in(elsewhere, "/accounts/login/", "admin", PASSWORD, address="10.1.1.1")
    assert ok.status_code == 302 and signed_in(elsewhere)


def test_a_success_below_the_limit_clears_the_count(operator, settings):
    client = Client()
    for _ in range(2):
        for _ in range(settings.LOGIN_FAILURES_PER_ACCOUNT - 1):
            sign_in(client, "/accounts/login/", "admin", "wrong")
        assert sign_in(client, "/accounts/login/", "admin", PASSWORD).status_code == 302
        client.logout()


def test_behind_the_proxy_each_forwarded_client_has_its_own_count(operator, settings):
    settings.BEHIND_PROXY = True
    settings.FORWARDED_ALLOW_IPS = ["10.0.0.5"]
    for i in range(2 * settings.LOGIN_FAILURES_PER_ADDRESS):
        sign_in(
            Client(),
            "/accounts/login/",
            "admin",
            "wrong",
            address="10.0.0.5",
            HTTP_X_FORWARDED_FOR=f"203.0.113.{i}",
        )
    owner = Client()
    response = sign_in(
        owner,
        "/accounts/login/",
        "admin",
        PASSWORD,
        address="10.0.0.5",
        HTTP_X_FORWARDED_FOR="198.51.100.7",
    )
    assert response.status_code == 302 and signed_in(owner)


def test_behind_the_proxy_a_client_cannot_pick_its_address_by_sending_x_forwarded_for(
    operator, settings
):
    settings.BEHIND_PROXY = True
    settings.FORWARDED_ALLOW_IPS = ["10.0.0.0/24"]
    codes = [
        sign_in(
            Client(),
            "/accounts/login/",
            "admin",
            "wrong",
            address="10.0.0.5",
            # the client wrote the left part; the proxy appended the address it saw
            HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 203.0.113.9, 10.0.0.7",
        ).status_code
        for i in range(settings.LOGIN_FAILURES_PER_ACCOUNT + 1)
    ]
    assert codes[-2:] == [429, 429]


def test_without_the_proxy_setting_x_forwarded_for_is_ignored(operator, settings):
    codes = [
        sign_in(
            Client(),
            "/accounts/login/",
            "admin",
            "wrong",
            address="127.0.0.1",
            HTTP_X_FORWARDED_FOR=f"192.0.2.{i}",
        ).status_code
        for i in range(settings.LOGIN_FAILURES_PER_ACCOUNT + 1)
    ]
    assert codes[-2:] == [429, 429]


def test_a_sign_in_without_a_request_is_not_throttled(operator):
    from django.contrib.auth import authenticate

    assert authenticate(username="admin", password=PASSWORD) is not None


@pytest.mark.django_db(transaction=True)
def test_parallel_guesses_never_get_more_password_checks_than_the_limit(
    settings, monkeypatch: pytest.MonkeyPatch
):
    get_user_model().objects.create_user("admin", "admin@example.com", PASSWORD)
    checked = []
    original: Callable[[AbstractBaseUser, str], bool] = AbstractBaseUser.check_password

    def slow_check(user: AbstractBaseUser, raw_password: str) -> bool:
        checked.append(raw_password)
        time.sleep(0.05)  # a real hash takes this long and more: the window a race needs
        return original(user, raw_password)

    monkeypatch.setattr(AbstractBaseUser, "check_password", slow_check)
    start = threading.Barrier(24)
    codes: list[int] = []

    def guess(i: int) -> None:
        try:
            start.wait()
            codes.append(sign_in(Client(), "/accounts/login/", "admin", f"wrong-{i}").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(codes) == 24 and set(codes) <= {200, 429}
    assert len(checked) <= settings.LOGIN_FAILURES_PER_ACCOUNT
    assert codes.count(429) >= 24 - settings.LOGIN_FAILURES_PER_ACCOUNT
