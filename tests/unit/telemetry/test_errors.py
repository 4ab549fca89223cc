"""One error class for a refused value (issue 17, item 4): telemetry.errors.FieldError."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from telemetry.errors import FieldError

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = ("telemetry", "compaction", "console", "demo")


@given(field=st.text(min_size=1), message=st.text(), status=st.integers(400, 499))
def test_a_field_error_names_its_field_first_and_keeps_each_part(field, message, status):
    error = FieldError(field, message, status=status)
    assert str(error) == f"{field}: {message}"
    assert (error.field, error.message, error.status) == (field, message, status)
    assert isinstance(error, ValueError)


def test_the_default_status_is_422():
    assert FieldError("x", "is wrong").status == 422


def _takes_a_field(node: ast.ClassDef) -> bool:
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return any(arg.arg == "field" for arg in item.args.args + item.args.kwonlyargs)
    return False


def test_no_other_error_class_carries_a_field():
    """The (field, message, status) shape exists once; a new domain error raises FieldError
    (or, if a catch site needs a name, subclasses it without fields of its own)."""
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef) and _takes_a_field(node):
                    found.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert found == ["telemetry/errors.py:FieldError"]
