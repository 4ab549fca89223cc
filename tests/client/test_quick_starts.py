"""The client README's quick starts run as written, and the offline example runs, against the
live console and the fake provider (the SDKs find it through their usual base-URL variables)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from compaction.models import LogMessage, OverflowEvent
from telemetry.models import LLMCall

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
README = (CLIENT / "README.md").read_text()


def quick_start(section: str) -> str:
    """The first python block under a `## section` heading of the client README."""
    body = README.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", body, re.S)
    assert match, section
    return match.group(1)


def run(
    code_or_path: str | Path, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-W", "ignore"]
    command += (
        [str(code_or_path), *args] if isinstance(code_or_path, Path) else ["-c", code_or_path]
    )
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture
def environment(live_server, agent_key, provider) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(
        CONTEXT_CONSOLE_URL=live_server.url,
        CONTEXT_CONSOLE_KEY=agent_key,
        ANTHROPIC_API_KEY="offline",
        ANTHROPIC_BASE_URL=provider.url,
        ANTHROPIC_API_URL=provider.url,
        OPENAI_API_KEY="offline",
        OPENAI_BASE_URL=provider.url + "/v1",
        # this checkout's client and the core it depends on (not the venv's editable install)
        PYTHONPATH=os.pathsep.join(
            (str(CLIENT / "src"), str(CLIENT.parent.parent / "core" / "src"))
        ),
    )
    return env


@pytest.mark.parametrize(
    ("section", "session"),
    [("Anthropic", "ticket-42"), ("OpenAI", "ticket-43"), ("LangChain v1", "ticket-44")],
)
def test_the_quick_starts_run_as_written(section, session, environment, provider):
    code = quick_start(section)
    assert len(ast.parse(code).body) <= 6  # imports and two statements: a five-line change
    result = run(code, environment)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(provider.accepted()) == 1
    # reported at exit (the queue is flushed then) and logged with the reply
    assert LLMCall.objects.filter(session__external_id=session).count() == 1
    assert LogMessage.objects.filter(session__external_id=session, role="assistant").count() == 1


def test_the_offline_example_runs(environment, provider):
    result = run(
        CLIENT / "examples" / "agent_loop.py",
        environment,
        "--rounds",
        "8",
        "--overflow-at",
        "6",
        "--pause",
        "0",
        "--session",
        "example",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "overflows recovered: 1" in result.stdout and "records dropped: 0" in result.stdout
    assert LLMCall.objects.filter(session__external_id="example").count() == 8
    assert OverflowEvent.objects.filter(session__external_id="example", recovered=True).count() == 1
