"""Serve the vendored plotly.js bundle (console/vendor/plotly/, `console.plotly_bundle`) as
`plotly/<file>`: no CDN, and nothing else of that folder (its licence and facts) is collected."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import CheckMessage, Error
from django.core.files.storage import FileSystemStorage

from console.plotly_bundle import PREFIX, VENDOR, bundle


class PlotlyFinder(BaseFinder):
    """Finds exactly `plotly/<the bundle's file>`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=VENDOR)
        self.storage.prefix = PREFIX  # type: ignore[attr-defined]  # read by collectstatic

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        if not bundle().path.is_file():
            return [Error(f"the vendored plotly.js bundle is missing: {bundle().path}")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path != bundle().static_name:
            return [] if find_all else None
        match = str(bundle().path)
        return [match] if find_all else match

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield bundle().file, self.storage
