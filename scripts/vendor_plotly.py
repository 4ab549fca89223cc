"""Vendor (or check) the plotly.js partial bundle the console serves: console/vendor/plotly/.

    python scripts/vendor_plotly.py            # fetch, verify, write the files and bundle.json
    python scripts/vendor_plotly.py --check    # fetch, verify, and compare with what is vendored

The bundle is plotly.js's own prebuilt `finance` partial bundle (`dist/plotly-finance.min.js`),
taken unmodified from the `plotly.js` package of the npm registry at the pinned version. `npm
pack` fetches the package's tarball; its sha512 must equal the `dist.integrity` the registry
states for that version, or nothing is written. The bundle's trace types are read from the
package's own entry point of that bundle (`lib/index-finance.js`; `scatter` is in every bundle)
and written to bundle.json with the file's sha256, which the unit tests check offline
(tests/unit/console/test_plotly_bundle.py). Needs node's `npm` on PATH.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "console" / "vendor" / "plotly"
PACKAGE = "plotly.js"
VERSION = "4.1.1"  # the plotly.js of the plotly Python package the console was built against
BUNDLE = "finance"  # the smallest prebuilt bundle with every trace type the console draws
FILE = f"plotly-{BUNDLE}.min.js"


def npm(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["npm", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def fetch(work: Path) -> tuple[Path, str]:
    """The package's tarball in `work`, checked against the registry's integrity."""
    integrity = npm("view", f"{PACKAGE}@{VERSION}", "dist.integrity")
    npm("pack", f"{PACKAGE}@{VERSION}", "--silent", cwd=work)
    (tarball,) = work.glob("*.tgz")
    digest = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if integrity != f"sha512-{digest}":
        raise SystemExit(f"{tarball.name}: sha512-{digest} is not the registry's {integrity}")
    return tarball, integrity


def traces(index_source: str) -> list[str]:
    """The trace types a plotly.js bundle entry registers (`require('./bar')`, …) plus scatter,
    which plotly.js's core registers in every bundle; components (calendars) are not traces."""
    required = re.findall(r"require\('\./(\w+)'\)", index_source)
    return sorted({"scatter", *required} - {"core", "calendars"})


def build(work: Path) -> dict[str, object]:
    tarball, integrity = fetch(work)
    with tarfile.open(tarball) as archive:
        archive.extractall(work, filter="data")
    package = work / "package"
    bundle = package / "dist" / FILE
    header = bundle.read_text(encoding="utf-8")[:200]
    if f"v{VERSION}" not in header or f"({BUNDLE} - minified)" not in header:
        raise SystemExit(f"{FILE} does not say it is the {BUNDLE} bundle of v{VERSION}: {header!r}")
    return {
        "package": PACKAGE,
        "version": VERSION,
        "tarball_integrity": integrity,
        "file": FILE,
        "file_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
        "file_bytes": bundle.stat().st_size,
        "traces": traces((package / "lib" / f"index-{BUNDLE}.js").read_text(encoding="utf-8")),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        facts = build(work)
        package = work / "package"
        if args.check:
            pinned = json.loads((VENDOR / "bundle.json").read_text())
            same = (
                pinned == facts
                and (VENDOR / FILE).read_bytes() == (package / "dist" / FILE).read_bytes()
            )
            print("vendored bundle matches the registry" if same else "vendored bundle DIFFERS")
            return 0 if same else 1
        VENDOR.mkdir(parents=True, exist_ok=True)
        for old in VENDOR.glob("plotly-*.min.js"):
            old.unlink()
        shutil.copyfile(package / "dist" / FILE, VENDOR / FILE)
        shutil.copyfile(package / "LICENSE", VENDOR / "LICENSE")
        (VENDOR / "bundle.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(f"vendored {FILE} of {PACKAGE}@{VERSION} into {VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
