"""deploy/prometheus/alerts.yml: every rule has a name, an expression and a summary, and every
expression names only metrics /metrics exposes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"
# PromQL words that are not metric names
PROMQL = {
    "sum", "by", "without", "increase", "delta", "rate", "avg", "max", "min", "count",
    "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "humanizePercentage",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)  # grouping labels
    return {w for w in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr) if w not in PROMQL}


def exposed(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "counter":
                names.add(f"{name}_total")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


@pytest.mark.django_db
def test_every_rule_expression_names_only_metrics_the_console_exposes():
    text = Client().get("/metrics").content.decode()
    available = exposed(text)
    assert "alerts_firing" in available
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names, rule
        assert names <= available, (rule["alert"], names - available)


def test_every_rule_has_a_name_an_expression_and_a_summary():
    for rule in rules():
        assert rule["alert"] and rule["expr"] and rule["annotations"]["summary"]
