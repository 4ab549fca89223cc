"""/docs/: the documentation site when it is built, else the names of its pages.

`make docs` builds docs/ into site/ (MkDocs), and this view serves it as static files under
/docs/, so the console's Docs link works offline and matches the running version. Without a
build, /docs/ lists the pages and serves their Markdown sources as text.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.http import require_safe
from django.views.static import serve

from console.docs_site import inline_script_hashes, nav_pages, policy_with_scripts
from console.middleware import CONTENT_SECURITY_POLICY

ROOT = Path(settings.BASE_DIR)
SITE = ROOT / "site"
SOURCES = ROOT / "docs"


@require_safe
def docs(request: HttpRequest, path: str = "") -> HttpResponseBase:
    if (SITE / "index.html").is_file():
        return _built(request, path)
    return _unbuilt(request, path)


def _built(request: HttpRequest, path: str) -> HttpResponseBase:
    if not _inside(SITE / path):
        raise Http404("no such documentation page")
    if path == "" or path.endswith("/"):
        path += "index.html"
    elif (SITE / path).is_dir():
        # relative links inside a page resolve against its directory URL
        return HttpResponseRedirect(request.path + "/")
    response = serve(request, path, document_root=str(SITE))
    if path.endswith(".html") and response.status_code == 200:
        html = (SITE / path).read_text(encoding="utf-8")
        response["Content-Security-Policy"] = policy_with_scripts(
            CONTENT_SECURITY_POLICY, inline_script_hashes(html)
        )
    return response


def _inside(candidate: Path) -> bool:
    return candidate.resolve().is_relative_to(SITE.resolve())


def _unbuilt(request: HttpRequest, path: str) -> HttpResponseBase:
    pages = nav_pages((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    if path == "":
        return render(request, "console/docs_unbuilt.html", {"pages": pages, "nav": "docs"})
    if path not in {page for _, page in pages}:
        raise Http404("no such documentation page")
    response = serve(request, path, document_root=str(SOURCES))
    response["Content-Type"] = "text/plain; charset=utf-8"
    return response
