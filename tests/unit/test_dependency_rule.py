"""The dependency rule of the README, checked on every import statement (ast, no execution):
core/src/context_core imports nothing of the project or of Django; telemetry never imports compaction;
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
            "core/src/context_core",
            {"django", "celery", "ninja", "pydantic", "telemetry", "console", "kombu", "psycopg"},
        ),
        ("telemetry", {"compaction", "console", "demo", "alerts"}),
        # the demo plays the product through its API; the product never depends on it
        ("compaction", {"console", "demo", "alerts"}),
        # alerts build on telemetry and compaction; they know nothing of the console
        ("alerts", {"console", "demo"}),
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

    allowed = set(sys.stdlib_module_names) | {"context_core", "__future__"}
    offenders = [
        f"{path.relative_to(ROOT)}: {sorted(tops - allowed)}"
        for path, tops in top_levels("core/src/context_core")
        if tops - allowed
    ]
    assert offenders == []


# --- runtime links: the rule also holds for what is resolved or registered at run time -------

PRODUCT = ("console", "telemetry", "compaction")


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            found.append((name, node))
    return found


def test_telemetry_resolves_no_dotted_path_at_run_time():
    """A dotted path in settings or a dynamic import would hide a telemetry -> compaction edge."""
    dynamic = {"import_string", "import_module", "__import__"}
    offenders = [
        f"{path.relative_to(ROOT)} calls {name}"
        for path in sorted((ROOT / "telemetry").rglob("*.py"))
        for name, _ in _calls(path)
        if name in dynamic
    ]
    assert offenders == []


def test_telemetry_names_no_compaction_module_in_a_string():
    """Task names (`compaction.relieve_session`) are messages on the broker; a module path
    (`compaction.transcripts.x`) would be an import in disguise."""
    offenders = []
    for path in sorted((ROOT / "telemetry").rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("compaction.")
                and node.value.count(".") > 1
                and " " not in node.value
            ):
                offenders.append(f"{path.relative_to(ROOT)}: {node.value!r}")
    assert offenders == []


def test_telemetry_ports_are_registered_only_by_compaction_when_its_app_is_ready():
    """The one runtime edge telemetry -> compaction is a typed port, plugged in one place."""
    places = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name, _ in _calls(path):
                if name.startswith("register_"):
                    places.append((str(path.relative_to(ROOT)), name))
    assert places == [("compaction/apps.py", "register_log_appended_tokens")]
    tree = ast.parse((ROOT / "compaction/apps.py").read_text())
    ready = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "ready"]
    assert ready, "CompactionConfig.ready() registers the port"
    assert "register_log_appended_tokens" in ast.unparse(ready[0])
