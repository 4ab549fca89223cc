"""gunicorn's start-up warning: production serving /metrics to anyone is said loudly, except on a
loopback-only bind (what `make run` uses), which only this machine reaches."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from console import gunicorn_conf


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: Any) -> None:
        self.warnings.append(message % args if args else message)


def _started(address: list[Any]) -> list[str]:
    log = _Log()
    gunicorn_conf.when_ready(SimpleNamespace(cfg=SimpleNamespace(address=address), log=log))
    return log.warnings


@pytest.fixture(autouse=True)
def _production(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METRICS_TOKEN", raising=False)
    monkeypatch.setenv("DJANGO_DEBUG", "false")


@pytest.mark.parametrize("address", [[("0.0.0.0", 8000)], [("127.0.0.1", 8000), ("10.0.0.5", 80)]])
def test_a_reachable_bind_without_a_metrics_token_is_said_loudly(address):
    assert any("METRICS_TOKEN is not set" in w for w in _started(address))


@pytest.mark.parametrize("address", [[("127.0.0.1", 8000)], [("::1", 8000), ("127.0.0.2", 80)]])
def test_a_loopback_only_bind_is_not_warned(address):
    assert _started(address) == []


def test_a_metrics_token_silences_it(monkeypatch):
    monkeypatch.setenv("METRICS_TOKEN", "t")
    assert _started([("0.0.0.0", 8000)]) == []
