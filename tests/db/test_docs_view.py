"""/docs/: the built documentation site under the console's CSP plus the hashes of exactly its
inline scripts; without a build, the nav's page names and their Markdown sources; the Docs
link in every role's menu."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from console import docs_views
from tests.db.conftest import signed_in

pytestmark = pytest.mark.django_db

INLINE = "var theme = localStorage.getItem('palette');"


@pytest.fixture(autouse=True)
def _static_without_manifest(settings):
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site/ as MkDocs lays it out: index.html, a page per directory, assets."""
    site = tmp_path / "site"
    (site / "concepts").mkdir(parents=True)
    (site / "assets").mkdir()
    (site / "index.html").write_text(
        f'<html><script>{INLINE}</script><script src="assets/app.js"></script>'
        '<script id="__config" type="application/json">{"a": 1}</script>Home</html>'
    )
    (site / "concepts" / "index.html").write_text("<html>Concepts</html>")
    (site / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("outside the site")
    monkeypatch.setattr(docs_views, "SITE", site)
    return site


@pytest.fixture
def unbuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docs_views, "SITE", tmp_path / "no-site")


def test_the_built_site_is_served_with_its_inline_scripts_hashed_into_the_csp(client, built):
    response = client.get("/docs/")
    assert response.status_code == 200
    assert b"Home" in b"".join(response.streaming_content)
    digest = base64.b64encode(hashlib.sha256(INLINE.encode()).digest()).decode()
    csp = response["Content-Security-Policy"]
    script_src = next(d for d in csp.split("; ") if d.startswith("script-src"))
    assert script_src == f"script-src 'self' 'sha256-{digest}'"
    assert "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in script_src


def test_a_page_directory_redirects_to_its_slash_and_assets_are_served(client, built):
    assert client.get("/docs/concepts")["Location"] == "/docs/concepts/"
    page = client.get("/docs/concepts/")
    assert page.status_code == 200 and b"Concepts" in b"".join(page.streaming_content)
    asset = client.get("/docs/assets/app.js")
    assert asset.status_code == 200 and "javascript" in asset["Content-Type"]
    # a page without inline scripts keeps the console's own policy
    assert page["Content-Security-Policy"].split("; ")[1] == "script-src 'self'"


@pytest.mark.parametrize(
    "path", ["/docs/../secret.txt", "/docs/%2e%2e/secret.txt", "/docs/missing/", "/docs/x.html"]
)
def test_nothing_outside_the_site_and_nothing_missing_is_served(client, built, path):
    assert client.get(path).status_code == 404


def test_without_a_build_the_page_names_are_listed_and_their_sources_served(client, unbuilt):
    response = client.get("/docs/")
    assert response.status_code == 200
    text = response.content.decode()
    assert "make docs" in text and "Getting started" in text and 'href="/docs/concepts.md"' in text
    source = client.get("/docs/concepts.md")
    assert source.status_code == 200
    assert source["Content-Type"] == "text/plain; charset=utf-8"
    assert b"# Concepts" in b"".join(source.streaming_content)
    # only the nav's pages, nothing else of the repository
    assert client.get("/docs/../README.md").status_code == 404
    assert client.get("/docs/img/overview.png").status_code == 404


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_has_the_docs_link_in_its_menu(unbuilt, role):
    client = signed_in(role, f"reader-{role}")
    page = client.get("/").content.decode()
    assert '<a href="/docs/" >Docs</a>' in page
