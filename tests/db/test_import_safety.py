"""The transcript importer on hostile files: an endless line, a file without its last newline,
a file that never stops growing, symlinks out of the folder, FIFOs, secrets, a byte order mark."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from compaction.imports.store import import_file
from compaction.management.commands.import_transcripts import Command, Follower
from compaction.models import LogMessage, TranscriptImport
from context_core.line_framing import BOM, DEFAULT_MAX_LINE_BYTES
from telemetry.models import AgentProfile, AgentSession, LLMCall
from tests.unit.imports import fixtures as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile(make_agent: Any) -> AgentProfile:
    found: AgentProfile = make_agent("hostile").key.profile
    return found


def run_import(profile: AgentProfile, path: Path, **kwargs: Any) -> Any:
    with path.open("rb") as handle:
        return import_file(profile=profile, path=str(path), handle=handle, **kwargs)


def command(*args: str) -> tuple[str, bool]:
    """The command's output and whether it ended in a CommandError."""
    out = io.StringIO()
    try:
        call_command("import_transcripts", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return out.getvalue() + str(exc), True
    return out.getvalue(), False


def read_through(path: Path) -> float:
    """Seconds to read `path` in 1 MiB chunks: the linear baseline an import is held to."""
    began = time.perf_counter()
    with path.open("rb") as handle:
        while handle.read(1 << 20):
            pass
    return time.perf_counter() - began


@pytest.mark.timeout(120)
def test_an_endless_last_line_is_read_to_its_end_in_linear_time_and_refused_by_number(
    profile, tmp_path
):
    text = fx.codex_rollout()
    path = tmp_path / "rollout-sparse.jsonl"
    path.write_text(text)
    size = 128 << 20
    os.truncate(path, size)  # zeros to 128 MiB with no newline: no disk, no end of line
    read = min(read_through(path) for _ in range(3))
    # The fixed cost of an import (the database, detection): the same lines without the tail.
    short = tmp_path / "short" / "rollout-sparse.jsonl"
    short.parent.mkdir()
    short.write_text(text)
    began = time.perf_counter()
    run_import(AgentProfile.objects.create(name="hostile-short"), short)
    fixed = time.perf_counter() - began
    began = time.perf_counter()
    report = run_import(profile, path)
    spent = time.perf_counter() - began
    # Buffering the line whole re-copies it per chunk: quadratic, a thousand times the read.
    assert spent < 5 * fixed + 20 * read, (spent, fixed, read)
    number = text.count("\n") + 1
    assert (
        number,
        f"longer than {DEFAULT_MAX_LINE_BYTES} bytes: refused, not read into memory",
    ) in (report.skipped)
    assert LLMCall.objects.filter(session__profile=profile).count() == 3
    assert TranscriptImport.objects.get(profile=profile).offset == size  # read to its end
    again = run_import(profile, path)
    assert again.status == "unchanged" and again.skipped == []


def test_an_overlong_line_in_the_middle_is_refused_and_the_rest_imports(profile, tmp_path):
    lines = fx.codex_rollout().splitlines(keepends=True)
    long = '{"type": "event_msg", "payload": {"pad": "' + "x" * 5000 + '"}}\n'
    path = tmp_path / "rollout-long.jsonl"
    path.write_text("".join([lines[0], long, *lines[1:]]))
    output, _ = command(str(path), "--profile", profile.name, "--max-line-bytes", "4096")
    assert "skipped line 2: longer than 4096 bytes" in output
    assert "x" * 100 not in output
    assert LLMCall.objects.filter(session__external_id=fx.CODEX_SESSION).count() == 3


def test_an_overlong_line_read_over_many_budgets_imports_like_one_read(profile, tmp_path):
    lines = fx.codex_rollout().splitlines(keepends=True)
    path = tmp_path / "rollout-budget.jsonl"
    path.write_text("".join([lines[0], "y" * 9000 + "\n", *lines[1:]]))
    skipped = []
    for _ in range(200):
        report = run_import(profile, path, max_line_bytes=4096, budget=700)
        skipped += report.skipped
        if not report.more:
            break
    assert not report.more
    assert [line for line, _ in skipped] == [2]
    assert LLMCall.objects.filter(session__external_id=fx.CODEX_SESSION).count() == 3


def test_a_last_line_without_newline_waits_while_followed_and_imports_exactly_once(
    profile, tmp_path
):
    lines = fx.codex_rollout().splitlines(keepends=True)
    path = tmp_path / "rollout-open.jsonl"
    path.write_text("".join(lines[:-1]) + lines[-1].rstrip("\n"))
    growing = run_import(profile, path, final=False)
    assert growing.lines == len(lines) - 1  # the unterminated line waits for its newline
    quiet = run_import(profile, path, final=True)
    assert quiet.lines == 1  # the file stopped growing: its last line is complete
    with path.open("a") as handle:
        handle.write('\n{"type": "weird-kind", "payload": {}}\n')
    grown = run_import(profile, path, final=True)
    assert grown.lines == 1
    assert [line for line, _ in grown.skipped] == [len(lines) + 1]
    assert run_import(profile, path).status == "unchanged"
    assert LLMCall.objects.filter(session__external_id=fx.CODEX_SESSION).count() == 3


def test_follow_serves_every_file_while_another_grows_without_end(profile, tmp_path):
    folder = tmp_path / "projects"
    folder.mkdir()
    endless = folder / "rollout-endless.jsonl"
    pad = '{"type": "event_msg", "payload": {"type": "pad", "text": "' + "p" * 1000 + '"}}\n'
    endless.write_text(fx.codex_rollout() + pad * 2000)
    lines = fx.claude_code_session(truncated=False).splitlines(keepends=True)
    main = folder / f"{fx.SESSION}.jsonl"
    main.write_text("".join(lines[:6]))
    options = {
        "quiet_seconds": 3600.0,
        "json": False,
        "max_line_bytes": DEFAULT_MAX_LINE_BYTES,
        "pass_bytes": 64 << 10,
    }
    out = io.StringIO()
    follower = Follower(Command(stdout=out), profile, [str(folder)], None, options)
    calls = LLMCall.objects.filter(session__profile=profile)
    assert follower.run_pass(0.0)  # the endless file has more left after its share
    assert calls.filter(request_id="req_1").exists()
    with main.open("a") as handle:
        handle.writelines(lines[6:])
    served = None
    for turn in range(1, 6):
        with endless.open("a") as handle:  # the other agent writes on, faster than one share
            handle.write(pad * 100)
        assert follower.run_pass(float(turn))
        if calls.filter(request_id="req_s").exists():
            served = turn
            break
    assert served is not None and served <= 2, served


def test_symlinks_out_of_the_folder_and_fifos_are_refused_by_path(profile, tmp_path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "stolen.jsonl").write_text(fx.codex_rollout())
    (outside / "deep" / "other.jsonl").write_text(fx.codex_rollout())
    folder = tmp_path / "projects"
    folder.mkdir()
    (folder / f"{fx.SESSION}.jsonl").write_text(fx.claude_code_session())
    (folder / "link.jsonl").symlink_to(outside / "stolen.jsonl")
    (folder / "linked-folder").symlink_to(outside / "deep")
    (folder / "inside.jsonl").symlink_to(folder / f"{fx.SESSION}.jsonl")
    os.mkfifo(folder / "pipe.jsonl")  # opening it for reading would block forever
    output, failed = command(str(folder), "--profile", profile.name)
    assert failed
    assert f"{folder / 'link.jsonl'}: refused" in output
    assert "a symlink to a file outside" in output
    assert f"{folder / 'linked-folder'}: refused" in output
    assert f"{folder / 'pipe.jsonl'}: refused" in output
    assert not AgentSession.objects.filter(external_id=fx.CODEX_SESSION).exists()
    assert AgentSession.objects.filter(profile=profile, external_id=fx.SESSION).exists()
    assert TranscriptImport.objects.filter(profile=profile).count() == 1  # the link inside: once


@pytest.mark.parametrize("as_json", [False, True])
def test_a_refused_file_is_never_echoed(profile, tmp_path, as_json):
    secret = tmp_path / "planted.jsonl"
    secret.write_text("root:x:0:0:root:/root:/bin/bash SECRET-7f3a9c\n" + '{"a": "SECRET-2"}\n')
    args = [str(secret), "--profile", profile.name] + (["--json"] if as_json else [])
    output, failed = command(*args)
    assert failed
    assert "refused" in output and "line 1" in output
    assert "SECRET" not in output and "root:x" not in output
    assert LogMessage.objects.count() == 0


@pytest.mark.parametrize("text", [fx.claude_code_session(), fx.codex_rollout()])
def test_a_bom_prefixed_transcript_imports_the_same_as_without(profile, tmp_path, text):
    plain = tmp_path / "plain" / "rollout-a.jsonl"
    marked = tmp_path / "marked" / "rollout-a.jsonl"
    for path, prefix in ((plain, b""), (marked, BOM)):
        path.parent.mkdir()
        path.write_bytes(prefix + text.encode())
    other = AgentProfile.objects.create(name="hostile-bom")
    want = run_import(profile, plain)
    got = run_import(other, marked)
    assert got.status == want.status == "imported"
    assert (got.format, got.messages, got.calls, got.compactions, got.skipped) == (
        want.format,
        want.messages,
        want.calls,
        want.compactions,
        want.skipped,
    )
