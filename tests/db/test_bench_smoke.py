"""A tiny run of `make bench` (`python -m bench.run --smoke`): the harness itself works.

The harness always measures on PostgreSQL and RabbitMQ (its own database `bench_smoke_<pid>`
on the server of BENCH_DATABASE_URL or TEST_DATABASE_URL, its own queue), whichever backend this
stage of the suite uses: the PostgreSQL stage runs it, and the SQLite stage, where it would only
repeat the same run, skips it. Its figures mean nothing at these sizes; what is checked is that
every baseline and measurement is produced, the table is printed, the JSON is written, and
everything it started is gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.services import (
    DEFAULT_BROKER_URL,
    DEFAULT_DATABASE_URL,
    broker_reachable,
    postgres_reachable,
    with_database,
)

ROOT = Path(__file__).resolve().parents[2]
SERVER_URL = (
    os.environ.get("BENCH_DATABASE_URL")
    or os.environ.get("TEST_DATABASE_URL")
    or DEFAULT_DATABASE_URL
)
BROKER_URL = (
    os.environ.get("BENCH_BROKER_URL") or os.environ.get("TEST_BROKER_URL") or DEFAULT_BROKER_URL
)


def _unreachable() -> str | None:
    why = postgres_reachable(SERVER_URL)
    if why is not None:
        return f"PostgreSQL ({SERVER_URL}) is not reachable: {why}"
    why = broker_reachable(BROKER_URL)
    if why is not None:
        return f"RabbitMQ ({BROKER_URL}) is not reachable: {why}"
    return None


def _run_harness(tmp_path: Path, name: str, *args: str, timeout: int) -> tuple[dict[str, Any], str]:
    """`python -m bench.run --smoke ARGS` on its own database; (the JSON it wrote, its stdout)."""
    database_url = with_database(SERVER_URL, f"{name}_{os.getpid()}")
    out = tmp_path / f"{name}.json"
    env = {
        k: v
        for k, v in os.environ.items()
        # the harness sets its own; the stage's must not leak into gunicorn or the worker
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "CELERY_TASK_DEFAULT_QUEUE",
            "DJANGO_SETTINGS_MODULE",
        }
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.run",
            "--smoke",
            *args,
            "--database-url",
            database_url,
            "--broker-url",
            BROKER_URL,
            "--out",
            str(out),
            "--var-dir",
            str(tmp_path / "var"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return json.loads(out.read_text()), completed.stdout


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="the harness measures on PostgreSQL whatever the stage; once a suite run is enough",
)
def test_the_bench_harness_runs_end_to_end_in_smoke_mode(tmp_path: Path) -> None:
    why = _unreachable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the bench smoke run needs its services and CI=true: {why}")
        pytest.skip(f"the bench smoke run needs PostgreSQL and RabbitMQ: {why}")
    results, stdout = _run_harness(tmp_path, "bench_smoke", timeout=180)
    assert set(results["baselines"]) >= {
        "B_copy",
        "B_row",
        "B_noop",
        "B_read",
        "B_page",
        "B_django",
        "B_io",
        "B_json_roundtrip",
        "B_noop_task",
    }
    assert {bar["id"] for bar in results["bars"]} >= {f"P{i}" for i in (*range(1, 12), 13)} | {
        "PAL"
    }
    for bar in results["bars"]:
        assert bar["result"] in {"PASS", "MISS", "REPORT"}, bar
        assert bar["id"] in stdout
    # Exact ingest whatever the speed: nothing lost, nothing stored twice.
    for run in results["measurements"]["P1"]["integrity"]:
        assert (run["lost"], run["duplicated"], run["other"]) == (0, 0, 0), run
    for run in results["measurements"]["P10"]["integrity"]:
        assert (run["lost"], run["duplicated"], run["failed_exports"]) == (0, 0, 0), run
    # Worker memory after maximal OTLP exports: every export answered 200 by the same workers,
    # their memory measured before and after (the bar itself is the full run's).
    memory = results["measurements"]["P13"]
    assert memory["requests"] > 0 and memory["non_200"] == [] and memory["workers_replaced"] == []
    assert set(memory["after_rss_mb"]) == set(memory["baseline_rss_mb"]) != set()
    assert 0 < memory["rss_ratio"] <= 1.5, memory
    # Each baseline run is paired with its measurement's run (B_copy with P1, B_noop with P2).
    baselines, measurements = results["baselines"], results["measurements"]
    for measured, baseline in (("P1", "B_copy"), ("P2", "B_noop")):
        runs, paired = measurements[measured]["runs"], baselines[baseline]["runs"]
        assert len(runs) == len(paired) == len(measurements[measured]["ratio_per_run"])
        assert measurements[measured]["ratio_per_run"] == pytest.approx(
            [r / b for r, b in zip(runs, paired, strict=True)]
        )
    # Query counts do not grow with the data, even at smoke sizes.
    for measurement in ("P3", "P5"):
        counts = results["measurements"][measurement]["query_counts"]
        assert len(set(counts.values())) == 1, (measurement, counts)
    # The bench database is gone again.
    import psycopg

    with psycopg.connect(with_database(SERVER_URL, "postgres")) as conn:
        name = f"bench_smoke_{os.getpid()}"
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    assert left is None


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="the fleet harness measures on PostgreSQL whatever the stage; once a suite run is enough",
)
def test_the_fleet_harness_runs_end_to_end_in_smoke_mode(tmp_path: Path) -> None:
    """`make bench BENCH_SCALE=fleet` at smoke size: seeded server-side, two web instances and
    two workers, and still nothing lost, nothing stored twice, one compaction per version."""
    why = _unreachable()
    if why is not None:
        pytest.fail(f"the fleet smoke run needs its services: {why}")
    results, _ = _run_harness(tmp_path, "bench_fleet_smoke", "--scale", "fleet", timeout=240)
    seeded = results["measurements"]["fleet_seed"]
    assert seeded["sessions"] >= 400 and seeded["calls"] == 400 * 25 * 2, seeded
    assert seeded["bytes_per_million_calls"] > 0
    tables = seeded["storage"]["tables"]
    packed, hot = tables["telemetry_llmcall_packed"], tables["telemetry_llmcall_hot"]
    assert packed["toast"] > 0 and "call_unique_position" in hot["indexes"], tables
    assert tables["telemetry_llmcall"]["parts"] == [
        "telemetry_llmcall_hot",
        "telemetry_llmcall_packed",
    ]
    assert {bar["id"] for bar in results["bars"]} >= {"F0", "F1", "P1", "P2", "P5", "X2"}
    pair = results["measurements"]["pair"]
    assert (pair["lost"], pair["duplicated"], pair["compacted_twice"]) == (0, 0, []), pair


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"),
    reason="measures on PostgreSQL whatever the stage; once a suite run is enough",
)
def test_the_in_process_comparison_runs_both_sides_of_a_setting() -> None:
    """`python -m bench.inprocess --ab DB_PIPELINE`: each side's requests all stored (201) and
    its CPU printed; its scratch database dropped afterwards."""
    why = _unreachable()
    if why is not None:
        pytest.skip(why)
    name = f"inprocess_ab_{os.getpid()}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
    }
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.inprocess",
            "--kind",
            "single",
            "--ab",
            "DB_PIPELINE",
            "--rounds",
            "1",
            "--block",
            "5",
            "--warmup",
            "3",
            "--database-url",
            with_database(SERVER_URL, name),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    lines = [line for line in completed.stdout.splitlines() if line.startswith("DB_PIPELINE=")]
    assert [line.split(":")[0] for line in lines] == ["DB_PIPELINE=True", "DB_PIPELINE=False"]
    assert all("10 single requests" in line for line in lines), lines
    import psycopg

    with psycopg.connect(with_database(SERVER_URL, "postgres")) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    assert left is None
