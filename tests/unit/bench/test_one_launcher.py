"""One way to launch Chromium: the pages bench's `bench.pages.chromium` (Debian's binary, the
flags this machine needs). The browser tests and scripts/screenshot.py use it; nothing else in
the repository launches a browser with flags of its own (ast, no execution)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = ROOT / "bench" / "pages.py"
SKIPPED = {".venv", "var", "node_modules", ".git"}


def _launches(path: Path) -> list[int]:
    """The lines of `path` that call something's `.launch(...)` or name Chromium's flag list."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        launch = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "launch"
        )
        flag = isinstance(node, ast.Constant) and node.value == "--disable-background-networking"
        if isinstance(node, ast.expr) and (launch or flag):
            lines.append(node.lineno)
    return lines


def _sources() -> list[Path]:
    return [
        path
        for path in ROOT.rglob("*.py")
        if not SKIPPED & set(path.relative_to(ROOT).parts[:-1])
        and path != Path(__file__).resolve()  # this test names the flag it looks for
    ]


def test_only_the_bench_launches_chromium() -> None:
    found = {path: lines for path in _sources() if (lines := _launches(path))}
    assert set(found) == {LAUNCHER}, {str(p.relative_to(ROOT)): n for p, n in found.items()}


def test_the_screenshot_script_and_the_browser_tests_use_the_launcher() -> None:
    for path in (ROOT / "scripts" / "screenshot.py", ROOT / "tests" / "browser" / "conftest.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = {
            (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        assert ("bench.pages", "chromium") in imported, path
