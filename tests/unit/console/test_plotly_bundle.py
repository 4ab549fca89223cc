"""The vendored plotly.js bundle is the file bundle.json describes, and it registers every trace
type the console's figures use: a figure with a trace type the bundle lacks fails here (in the
browser plotly would draw it as an empty scatter, without an error)."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from console.gauge_chart import gauge_figure
from console.plotly_bundle import bundle

ROOT = Path(__file__).resolve().parents[3]
CONSOLE = ROOT / "console"
# "type" in a layout: an axis's type; a shape's is told by its coordinates (x0, xref, …)
AXIS_TYPES = frozenset({"-", "linear", "log", "date", "category", "multicategory"})
SHAPE_KEYS = frozenset({"x0", "x1", "y0", "y1", "xref", "yref"})


def figure_modules() -> list[Path]:
    """console/charts.py and every console module that builds figures with its helpers."""
    return sorted(
        path
        for path in CONSOLE.rglob("*.py")
        if path.name == "charts.py" or "from console.charts import" in path.read_text()
    )


def trace_types(path: Path) -> set[str]:
    """The trace types a figure module writes: every dict literal's "type" that is neither an
    axis's nor a shape's. A "type" that is not a string literal fails, since the check could
    not see it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Dict):
            continue
        keys = {
            k.value: v
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
        if "type" not in keys or SHAPE_KEYS & keys.keys():
            continue
        value = keys["type"]
        assert isinstance(value, ast.Constant) and isinstance(value.value, str), (
            f"{path.name}:{node.lineno}: a figure's type must be a literal"
        )
        if value.value not in AXIS_TYPES:
            found.add(value.value)
    return found


def test_the_vendored_file_is_the_one_bundle_json_describes() -> None:
    vendored = bundle()
    body = vendored.path.read_bytes()
    assert hashlib.sha256(body).hexdigest() == vendored.file_sha256
    header = body[:200].decode()
    assert f"v{vendored.version}" in header and "(finance - minified)" in header
    assert (vendored.path.parent / "LICENSE").read_text().startswith("MIT License")


def test_the_bundle_is_the_version_the_plotly_package_ships() -> None:
    """The stack's rule: the plotly.js the plotly package ships, or a partial bundle of the same
    version. Upgrading the package without re-vendoring (scripts/vendor_plotly.py) fails here."""
    from plotly.offline import get_plotlyjs_version

    assert bundle().version == get_plotlyjs_version()


def test_the_bundle_registers_every_trace_type_the_figures_use() -> None:
    modules = figure_modules()
    assert {p.name for p in modules} >= {
        "charts.py",
        "cache_charts.py",
        "fleet_charts.py",
        "gauge_chart.py",
    }
    used = set().union(*(trace_types(path) for path in modules))
    # the scan sees what the console draws (it cannot pass by finding nothing)
    assert used >= {"scatter", "bar", "indicator"}, used
    assert used <= bundle().traces, sorted(used - bundle().traces)


def test_a_built_figure_uses_only_trace_types_of_the_bundle() -> None:
    figure = gauge_figure(
        projected=90_000,
        window=200_000,
        reserved=20_000,
        prune_threshold=0.6,
        summarize_threshold=0.8,
    )
    assert {trace["type"] for trace in figure["data"]} <= bundle().traces


def test_the_scan_finds_a_trace_type_the_bundle_lacks(tmp_path: Path) -> None:
    module = tmp_path / "charts.py"
    module.write_text(
        'AXIS = {"type": "date", "title": "day"}\n'
        'SHAPE = {"type": "line", "x0": 0, "x1": 1}\n'
        'TRACE = {"type": "sankey", "node": {}}\n'
    )
    assert trace_types(module) == {"sankey"}
    assert not trace_types(module) <= bundle().traces
