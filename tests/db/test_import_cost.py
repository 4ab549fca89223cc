"""A transcript import costs what each chunk adds, whatever the log's size (P11's regression).

The parsed-log cache keeps at most `COMPACTION_LOG_CACHE_CHARS` per process and no log larger
than that: once an imported session's log outgrew it, every chunk re-read and re-parsed the
whole log (the append's parse, every stored seq and hash, and the calibration's rebuild of up
to 50 earlier surface versions, each from the whole log), so a 100 MB import never finished.
Here the budget is a few thousand characters and the chunks a few turns, so the log is many
times both; the log rows read per chunk must not grow with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db.models.query import QuerySet

import compaction.imports.store as store
from bench.transcripts import write_transcript
from compaction.imports.store import import_file
from compaction.log_cache import LOG_CACHE
from compaction.models import LogMessage, SurfaceVersion
from compaction.transcripts import derive, load_log, load_operations
from context_core import canonical_json, derive_surface
from telemetry.models import AgentProfile, AgentSession

pytestmark = pytest.mark.django_db

CHUNK_LINES = 30  # five turns of the synthetic transcript: ~20 log messages
BUDGET_CHARS = 20_000  # about six turns of log


@pytest.fixture
def profile(make_agent: Any) -> AgentProfile:
    found: AgentProfile = make_agent("import-cost").key.profile
    return found


@pytest.fixture
def per_chunk_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Log rows read from the database by each chunk's commit, in order."""
    reads: list[int] = []
    counting = False
    fetch_all = QuerySet._fetch_all

    def counted_fetch_all(self: QuerySet[Any]) -> None:
        fresh = self._result_cache is None
        fetch_all(self)
        if counting and fresh and self.model is LogMessage:
            reads[-1] += len(self._result_cache or [])

    commit = store._commit

    def counted_commit(*args: Any, **kwargs: Any) -> bool:
        nonlocal counting
        reads.append(0)
        counting = True
        try:
            return commit(*args, **kwargs)
        finally:
            counting = False

    monkeypatch.setattr(QuerySet, "_fetch_all", counted_fetch_all)
    monkeypatch.setattr(store, "_commit", counted_commit)
    monkeypatch.setattr(store, "CHUNK_LINES", CHUNK_LINES)
    monkeypatch.setattr(LOG_CACHE, "budget", BUDGET_CHARS)
    return reads


def run_import(profile: AgentProfile, path: Path) -> Any:
    with path.open("rb") as handle:
        return import_file(profile=profile, path=str(path), handle=handle)


@pytest.mark.parametrize("compact_every", [10, 1_000], ids=["agent-compactions", "one-segment"])
def test_an_import_reads_per_chunk_what_the_chunk_adds_not_the_log(
    profile, tmp_path, per_chunk_reads, compact_every
):
    path = tmp_path / "big.jsonl"
    shape = write_transcript(path, 400_000, compact_every=compact_every)
    report = run_import(profile, path)
    assert report.status == "imported" and report.calls == shape["requests"]
    session = AgentSession.objects.get(profile=profile)
    log_chars = sum(LogMessage.objects.filter(session=session).values_list("chars", flat=True))
    chunks = len(per_chunk_reads)
    assert chunks >= 12 and log_chars > 10 * BUDGET_CHARS
    # A chunk of 30 lines appends ~20 messages. It reads back the last row of the parse it
    # holds (still the stored log?), a new cut's summary, and for the projection (D6) what
    # the log holds after the latest call's reply: at most what the chunk added, never the log.
    assert max(per_chunk_reads) <= 2 * CHUNK_LINES, per_chunk_reads


def test_the_versions_an_import_gives_its_requests_hold_the_chars_they_rebuild_to(
    profile, tmp_path, per_chunk_reads
):
    path = tmp_path / "versions.jsonl"
    write_transcript(path, 120_000, compact_every=7)
    assert run_import(profile, path).status == "imported"
    session = AgentSession.objects.get(profile=profile)
    log = load_log(session, use_cache=False)
    operations = load_operations(session)
    versions = SurfaceVersion.objects.filter(session=session).order_by("version")
    assert versions.count() > 50
    for version in versions:
        # D6: what the request at this version saw, derived from scratch from the whole log
        expected = derive_surface(
            log[: version.log_messages], operations[: version.operations]
        ).chars
        assert version.chars == expected, version.version
    # D1: the stored surface is the derivation from scratch, and importing again adds nothing
    _, _, surface = derive(session, use_cache=False)
    assert session.surface.body == canonical_json(surface).decode("ascii")
    again = run_import(profile, path)
    assert again.lines == 0 and again.messages == 0
