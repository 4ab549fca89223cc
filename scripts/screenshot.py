"""Screenshot a page of a running console for the docs: `python scripts/screenshot.py URL OUT.png`.

Signs in with CONSOLE_ADMIN_USER / CONSOLE_ADMIN_PASSWORD (what `make run` printed; also in
var/admin-login.txt), opens URL in Debian's chromium through Playwright and writes the page as
it is on screen. docs/img/overview.png is the overview of `make run`'s demo data, taken so.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urljoin

from playwright.sync_api import sync_playwright


def main(url: str, out: str) -> None:
    user = os.environ.get("CONSOLE_ADMIN_USER", "admin")
    password = os.environ["CONSOLE_ADMIN_PASSWORD"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(urljoin(url, "/accounts/login/"))
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        page.goto(url)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=out)
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
