"""The plotly.js bundle the console serves, as vendored in console/vendor/plotly/.

plotly.js's prebuilt `finance` partial bundle at the version of the plotly Python package the
figures were written for (scripts/vendor_plotly.py fetches it from the npm registry, checks the
registry's integrity and writes bundle.json). It holds every trace type the console's figures
use (scatter, bar, indicator) at about a quarter of the full bundle's size. bundle.json is the
one statement of what the file is: its version, its sha256 and the trace types it registers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VENDOR = Path(__file__).resolve().parent / "vendor" / "plotly"
PREFIX = "plotly"  # the static files' folder: {% static 'plotly/<file>' %}


@dataclass(frozen=True)
class Bundle:
    version: str
    file: str
    file_sha256: str
    traces: frozenset[str]

    @property
    def path(self) -> Path:
        return VENDOR / self.file

    @property
    def static_name(self) -> str:
        return f"{PREFIX}/{self.file}"


@cache
def bundle() -> Bundle:
    facts = json.loads((VENDOR / "bundle.json").read_text(encoding="utf-8"))
    return Bundle(
        version=facts["version"],
        file=facts["file"],
        file_sha256=facts["file_sha256"],
        traces=frozenset(facts["traces"]),
    )
