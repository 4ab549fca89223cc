"""Screenshot a page of a running console for the docs: `python scripts/screenshot.py URL OUT.png`.

Signs in with CONSOLE_ADMIN_USER / CONSOLE_ADMIN_PASSWORD (what `make run` printed; also in
var/admin-login.txt), opens URL in Debian's chromium and writes the page as it is on screen.
The browser is launched as the pages bench and the browser tests launch it (`bench.pages.chromium`:
one set of flags for this machine). docs/img/overview.png is the overview of `make run`'s demo
data, taken so.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urljoin

# run as a file, the script's folder is on the path, not the repository whose launcher it uses
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pages import chromium  # noqa: E402 - after the path is set


def main(url: str, out: str) -> None:
    user = os.environ.get("CONSOLE_ADMIN_USER", "admin")
    password = os.environ["CONSOLE_ADMIN_PASSWORD"]
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(urljoin(url, "/accounts/login/"))
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        page.goto(url)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
