"""Screenshot a page of a running console: `python scripts/screenshot.py URL OUT.png`.

Signs in with CONSOLE_ADMIN_USER / CONSOLE_ADMIN_PASSWORD (what `make run` printed; also in
var/admin-login.txt), opens URL in Debian's chromium and writes the page as it is on screen
(`--full-page`: the whole page). `--width` and `--height` set the window: 1440 and 390 px are
the desktop and the phone the browser tests check. The browser is launched as the pages bench
and the browser tests launch it (`bench.pages.chromium`: one set of flags for this machine).
docs/img/overview.png is the overview of `make run`'s demo data, taken at the default size.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import urljoin

# run as a file, the script's folder is on the path, not the repository whose launcher it uses
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pages import chromium  # noqa: E402 - after the path is set


def main(url: str, out: str, *, width: int, height: int, full_page: bool) -> None:
    user = os.environ.get("CONSOLE_ADMIN_USER", "admin")
    password = os.environ["CONSOLE_ADMIN_PASSWORD"]
    with chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(urljoin(url, "/accounts/login/"))
        page.fill("input[name=username]", user)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        page.wait_for_load_state("networkidle")
        page.goto(url)
        page.wait_for_load_state("networkidle")
        page.screenshot(path=out, full_page=full_page)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the page, e.g. http://127.0.0.1:8000/sessions/")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--width", type=int, default=1280, help="window width in px (1280)")
    parser.add_argument("--height", type=int, default=900, help="window height in px (900)")
    parser.add_argument("--full-page", action="store_true", help="the whole page, not the window")
    args = parser.parse_args()
    main(args.url, args.out, width=args.width, height=args.height, full_page=args.full_page)
