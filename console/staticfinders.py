"""Serve plotly.js from the plotly package's own file: no CDN, no copy in the repository."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage, Error
from django.core.files.storage import FileSystemStorage

PREFIX = "plotly"
FILENAME = "plotly.min.js"


class PlotlyFinder(BaseFinder):
    """Finds exactly `plotly/plotly.min.js` (the package's data folder holds other, large
    files that must not be collected)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.location = Path(plotly.__file__).resolve().parent / "package_data"
        self.storage = FileSystemStorage(location=self.location)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # read by collectstatic

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if not (self.location / FILENAME).is_file():
            return [Error(f"plotly.js is missing from the plotly package: {self.location}")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path != f"{PREFIX}/{FILENAME}":
            return [] if find_all else None
        match = str(self.location / FILENAME)
        return [match] if find_all else match

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield FILENAME, self.storage
