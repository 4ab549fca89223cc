"""The pages bench's baseline (B_full): plotly's full bundle served as the vendored bundle is.

`bench.pages` copies the plotly Python package's full plotly.js (the same version) into
`BENCH_FULL_PLOTLY_DIR` under the vendored bundle's file name; this finder serves it there in
place of `console.staticfinders.PlotlyFinder` (bench.settings), so the pages, their script tag
and the static files' hashing, compression and caching are the product's own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.files.storage import FileSystemStorage

from console.plotly_bundle import PREFIX, bundle
from console.staticfinders import PlotlyFinder


class FullBundleFinder(PlotlyFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.location = Path(os.environ["BENCH_FULL_PLOTLY_DIR"]) / "bundle"
        self.storage = FileSystemStorage(location=self.location)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # read by collectstatic

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path != bundle().static_name:
            return [] if find_all else None
        match = str(self.location / bundle().file)
        return [match] if find_all else match
