"""`pip install ./core ./clients/python` in a fresh virtualenv (no system site-packages) works,
pulls in httpx and the pure core only, and the installed package runs without the repository on
its path.

pip fetches the build backend and httpx from the package index, as a user's install would."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
# the pure core the client depends on (context-console-core), beside the console in the repo
CORE = PACKAGE.parents[1] / "core"

SCRIPT = """
import json, sys
import context_console
from context_console import Console, ReportingOptions
from context_console.fake_provider import FakeProvider
assert "clients/python/src" not in context_console.__file__, context_console.__file__
import context_core
assert "core/src" not in context_core.__file__, context_core.__file__
console = Console("http://127.0.0.1:9", "key", reporting=ReportingOptions(max_retries=0))
console.session("s").report({"input_tokens": 1, "output_tokens": 1}, model="claude-sonnet-4-6")
console.flush(10)
for name in ("anthropic", "openai", "langchain", "django"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{name} came along; the client must depend on httpx only")
print(json.dumps({
    "dropped": console.dropped, "spooled": console.spooled, "version": context_console.__version__
}))
"""


def test_pip_install_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # A copy, so the build's in-tree leftovers (build/, *.egg-info) never land in the checkout.
    leftovers = shutil.ignore_patterns("build", "*.egg-info", ".mypy_cache", "__pycache__", "tests")
    source = tmp_path / "context-console-client"
    shutil.copytree(PACKAGE, source, ignore=leftovers)
    core = tmp_path / "context-console-core"
    shutil.copytree(CORE, core, ignore=leftovers)
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(core),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    run = subprocess.run(
        [str(python), "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # Spooled (into the test's folder: CONTEXT_CONSOLE_SPOOL_DIR is inherited), not dropped.
    assert run.stdout.strip().endswith('{"dropped": 0, "spooled": 1, "version": "0.1.0"}')
    assert sys.version_info >= (3, 10)
