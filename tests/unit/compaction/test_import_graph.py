"""compaction's modules import each other in one direction only, every import at module top
(ast, no execution, no Django): a function-local import that dodges a circle hides the circle
instead of removing it, so the graph here counts function-local imports too.

The one exception is `CompactionConfig.ready` in compaction/apps.py: Django imports apps.py
before any model is loaded, so an app's start-up wiring is imported there by design."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "compaction"
# Django's documented place for start-up imports (see the module docstring)
LATE_BY_DESIGN = {("compaction.apps", "ready")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {
        module_name(path): ast.parse(path.read_text(), filename=str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
    }


def targets(node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The compaction modules an import statement loads (a `from compaction import services`
    names a module; a `from compaction.services import x` names a function of one)."""
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif node.module and node.level == 0:
        names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    else:
        names = set()
    return {name for name in names if name in known and name != "compaction"}


def imports_with_scope(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement with the function it sits in ("" at module top)."""
    found: list[tuple[ast.Import | ast.ImportFrom, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.append((child, scope))
            inner = (
                child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            )
            visit(child, inner)

    visit(tree, "")
    return found


def import_graph() -> dict[str, set[str]]:
    trees = modules()
    known = set(trees)
    return {
        name: set().union(*(targets(node, known) for node, _ in imports_with_scope(tree))) - {name}
        for name, tree in trees.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as a path that ends where it starts, or None."""
    done: set[str] = set()
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if (cycle := walk(nxt)) is not None:
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if (cycle := walk(start)) is not None:
            return cycle
    return None


def test_compaction_modules_import_each_other_without_a_circle():
    assert find_cycle(import_graph()) is None


def test_compaction_imports_its_own_modules_at_module_top_only():
    trees = modules()
    known = set(trees)
    late = [
        f"{name}.{scope} imports {sorted(targets(node, known))}"
        for name, tree in trees.items()
        for node, scope in imports_with_scope(tree)
        if scope and targets(node, known) and (name, scope) not in LATE_BY_DESIGN
    ]
    assert late == []


def test_the_graph_sees_a_circle_hidden_in_a_function():
    """The checker itself: a circle closed by a function-local import is a circle."""
    graph = {"a": {"b"}, "b": set()}
    assert find_cycle(graph) is None
    tree = ast.parse("def f():\n    from compaction.a import x\n")
    (node, scope), *_ = imports_with_scope(tree)
    graph["b"] = {name.removeprefix("compaction.") for name in targets(node, {"compaction.a"})}
    assert scope == "f"
    assert find_cycle(graph) == ["a", "b", "a"]
