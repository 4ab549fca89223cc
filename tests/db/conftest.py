"""Personas, factories and a real Celery worker for the database suite.

The suite runs twice in `make test`: on PostgreSQL + RabbitMQ, and on the embedded SQLite +
filesystem broker. Nothing here is mocked: the worker is a separate process on the real broker,
reading the same test database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client

from telemetry.catalogue import forget_catalogue
from telemetry.keys import create_agent_key
from telemetry.models import AgentKey
from telemetry.policy_store import forget_policies
from telemetry.seeding import ensure_defaults

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _plain_http(settings: Any) -> None:
    """The test client speaks plain HTTP; every other production setting stays in force."""
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture(autouse=True)
def _fresh_remembered_reads() -> None:
    """Policies and the catalogue are remembered per process for a second; a test's rolled-back
    rows (or a previous test's `.update()`) must not reach the next test through them."""
    forget_policies()
    forget_catalogue()


@pytest.fixture
def held_remembered_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key checks, policies and catalogues stay remembered for an hour, not a second: a test
    that counts a warmed request's queries must not count a re-read because the machine was
    slow between the warm-up and the measured request (CI saw a session read cost 5 queries,
    not 3, after such a pause)."""
    from telemetry import catalogue, keys, policy_store

    monkeypatch.setattr(keys, "KEY_CACHE_SECONDS", 3_600.0)
    monkeypatch.setattr(policy_store._by_key, "seconds", 3_600.0)
    monkeypatch.setattr(catalogue._by_key, "seconds", 3_600.0)


@dataclass
class Agent:
    """An agent persona: a key bound to a profile, and a client that sends it."""

    key: AgentKey
    plaintext: str
    client: Client

    @property
    def profile(self) -> str:
        return self.key.profile.name

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.plaintext}"}

    def get(self, path: str, **extra: Any) -> Any:
        return self.client.get(path, headers=self.headers(), **extra)

    def post(self, path: str, data: Any = None, **extra: Any) -> Any:
        body = "" if data is None else data if isinstance(data, str | bytes) else _json(data)
        return self.client.post(
            path, body, content_type="application/json", headers=self.headers(), **extra
        )


def _json(data: Any) -> str:
    import json

    return json.dumps(data)


@pytest.fixture
def make_agent(db: None) -> Callable[..., Agent]:
    # A transactional test flushes the tables afterwards, seeded rows included; put back what is
    # missing (policy, D7 profiles, catalogue) so every test starts from the same defaults.
    ensure_defaults()

    def make(profile: str = "default", scopes: tuple[str, ...] = (), name: str = "") -> Agent:
        issued = create_agent_key(profile_name=profile, scopes=scopes, name=name)
        return Agent(key=issued.key, plaintext=issued.plaintext, client=Client())

    return make


@pytest.fixture
def agent(make_agent: Callable[..., Agent]) -> Agent:
    """An ingesting agent of the `default` profile."""
    return make_agent("default")


@pytest.fixture
def compactor(make_agent: Callable[..., Agent]) -> Agent:
    """An agent of the `default` profile whose key may also compact."""
    return make_agent("default", scopes=("compact",))


@pytest.fixture
def outsider(make_agent: Callable[..., Agent]) -> Agent:
    """An agent of another profile: it must see nothing of `default`'s sessions."""
    return make_agent("outsiders")


# --- people signed in to the console ----------------------------------------------------------

PASSWORD = "a-long-test-password-123"


def make_user(name: str, role: str | None) -> User:
    """A console user in the `role` group ("superuser": a superuser; None: in no group)."""
    user = User.objects.create_user(name, password=PASSWORD)
    if role == "superuser":
        user.is_superuser = True
        user.save()
    elif role is not None:
        # get_or_create: a transactional test may have flushed the migration's groups
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def sign_in(user: User, *, enforce_csrf: bool = False) -> Client:
    """A client signed in as `user`."""
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(user)
    return client


def signed_in(role: str | None, name: str = "") -> Client:
    """A client signed in as a new user of `role`, named `name` (default: after the role)."""
    return sign_in(make_user(name or f"user-{role}", role))


@pytest.fixture
def client_as(db: None) -> Callable[..., Client]:
    """A client signed in as a fresh user of `role` (None: signed in, but in no role group)."""
    count = iter(range(1_000))

    def make(role: str | None, *, enforce_csrf: bool = False) -> Client:
        return sign_in(make_user(f"user-{role}-{next(count)}", role), enforce_csrf=enforce_csrf)

    return make


# --- a real Celery worker ------------------------------------------------------------------


def _database_url_for_worker() -> str:
    current = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{current['NAME']}"
    user = current.get("USER") or ""
    password = f":{current['PASSWORD']}" if current.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = current.get("HOST") or "127.0.0.1"
    port = f":{current['PORT']}" if current.get("PORT") else ""
    return f"postgres://{auth}{host}{port}/{current['NAME']}"


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_worker(
    log_path: Path, *, extra_env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()
) -> WorkerProcess:
    """Start `celery worker` on the test database and broker; wait until it says it is ready.
    `extra_args` go to `celery worker` (`-B` runs beat inside it)."""
    env = os.environ.copy()
    env["DATABASE_URL"] = _database_url_for_worker()
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    env["CELERY_TASK_DEFAULT_QUEUE"] = settings.CELERY_TASK_DEFAULT_QUEUE
    env["CONSOLE_VAR_DIR"] = str(settings.VAR_DIR)
    env.update(extra_env or {})
    log = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "1",
            "--queues",
            settings.CELERY_TASK_DEFAULT_QUEUE,
            "--hostname",
            f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
            "--without-gossip",
            "--without-mingle",
            *extra_args,
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    worker = WorkerProcess(process=process, log_path=log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited during start-up:\n{worker.log()}")
        if " ready." in worker.log():
            return worker
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the Celery worker did not become ready:\n{worker.log()}")


def stop_worker(worker: WorkerProcess) -> None:
    if worker.process.poll() is None:
        worker.process.terminate()
        try:
            worker.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait()


@pytest.fixture
def celery_worker(transactional_db: None, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A real worker process for one test. Data the test commits is visible to it."""
    worker = start_worker(tmp_path / "worker.log")
    try:
        yield worker
    finally:
        stop_worker(worker)


def wait_until(
    predicate: Callable[[], bool], *, timeout: float = 30, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
