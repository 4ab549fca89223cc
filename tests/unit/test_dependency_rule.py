"""The dependency rule of the README, checked on every import statement (ast, no execution):
compaction/core imports nothing of the project or of Django; telemetry never imports compaction;
neither imports console."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def top_levels(folder: str) -> list[tuple[Path, set[str]]]:
    return [
        (path, {name.split(".")[0] for name in imported_modules(path)})
        for path in sorted((ROOT / folder).rglob("*.py"))
    ]


@pytest.mark.parametrize(
    ("folder", "forbidden"),
    [
        (
            "compaction/core",
            {"django", "celery", "ninja", "pydantic", "telemetry", "console", "kombu", "psycopg"},
        ),
        ("telemetry", {"compaction", "console"}),
    ],
)
def test_the_dependency_rule_holds(folder, forbidden):
    offenders = [
        f"{path.relative_to(ROOT)} imports {sorted(tops & forbidden)}"
        for path, tops in top_levels(folder)
        if tops & forbidden
    ]
    assert offenders == []


def test_compaction_outside_core_never_imports_console():
    offenders = [
        str(path.relative_to(ROOT)) for path, tops in top_levels("compaction") if "console" in tops
    ]
    assert offenders == []


def test_core_imports_only_itself_and_the_standard_library():
    import sys

    allowed = set(sys.stdlib_module_names) | {"compaction", "__future__"}
    offenders = [
        f"{path.relative_to(ROOT)}: {sorted(tops - allowed)}"
        for path, tops in top_levels("compaction/core")
        if tops - allowed
    ]
    assert offenders == []
