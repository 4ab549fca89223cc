"""The README stays a product README and the docs speak of the product, not of how it was built:
README.md at most 400 lines; neither README.md nor docs/ names a commit of this repository, a
numbered round or session of past work, or a footnote; the configuration page lists exactly the
variables the code reads; the API page's quick start is the README's, which
tests/db/test_readme_quickstart.py runs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 400

HEX = re.compile(r"\b[0-9a-f]{7,40}\b")
# "round 3", "sessions 7", "footnote 12"; a command-line flag such as `--rounds 40` is not history
HISTORY = re.compile(r"(?<!-)\b(?:rounds?|sessions?|footnotes?)\s+\d+\b", re.IGNORECASE)
SUPERSCRIPT_DIGITS = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹]")
# what settings.py reads: env_str("NAME", …), env_bool("NAME", …), …
SETTINGS_READ = re.compile(r"\benv_(?:str|bool|int|list|url|choice|optional)\(\s*\"([A-Z0-9_]+)\"")
TABLE_NAME = re.compile(r"`([A-Z][A-Z0-9_]{2,})`")


def texts() -> list[tuple[str, str]]:
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")) for path in pages]


def quick_start(text: str) -> str:
    section = text.split(
        "## API quick start" if "## API quick start" in text else "## Quick start", 1
    )
    return section[1].split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_readme_is_at_most_400_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_no_numbered_round_session_or_footnote_in_readme_or_docs() -> None:
    found = [
        f"{name}: {match.group(0)!r}"
        for name, text in texts()
        for match in [*HISTORY.finditer(text), *SUPERSCRIPT_DIGITS.finditer(text)]
    ]
    assert not found, "history belongs in git and bench/results, not in prose: " + ", ".join(found)


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout"
)
def test_no_commit_of_this_repository_in_readme_or_docs() -> None:
    commits = subprocess.run(
        ["git", "rev-list", "--all"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert commits, "git rev-list found no commit: the check would prove nothing"
    found = [
        f"{name}: {token}"
        for name, text in texts()
        for token in set(HEX.findall(text))
        if any(commit.startswith(token) for commit in commits)
    ]
    assert not found, "commit hashes of this repository: " + ", ".join(sorted(found))


def test_the_hash_check_recognises_a_commit_of_this_repository() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert HEX.findall(f"measured on main {head[:7]} today") == [head[:7]]


def test_every_variable_settings_reads_is_documented_and_every_documented_one_is_read() -> None:
    settings = (ROOT / "console" / "settings.py").read_text(encoding="utf-8")
    read = set(SETTINGS_READ.findall(settings))
    assert len(read) > 30, "the pattern no longer finds settings.py's variables"
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in TABLE_NAME.findall(row.split(" | ")[0])}
    assert read - documented == set(), "undocumented in docs/configuration.md"
    code = "\n".join(
        path.read_text(encoding="utf-8", errors="replace")
        for pattern in ("**/*.py", "scripts/*.sh", "Makefile")
        for path in ROOT.glob(pattern)
        if ".venv" not in path.parts and "site" not in path.parts
    )
    unread = {name for name in documented if not re.search(rf"\b{name}\b", code)}
    assert unread == set(), "documented in docs/configuration.md but read nowhere"


def test_the_api_page_quick_start_is_the_readme_one() -> None:
    readme = quick_start(README.read_text(encoding="utf-8"))
    page = quick_start((DOCS / "api.md").read_text(encoding="utf-8"))
    assert "create_agent_key" in readme
    assert page == readme
