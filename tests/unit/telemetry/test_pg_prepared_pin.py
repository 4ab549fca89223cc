"""`telemetry.ingest.pg_prepared` is the one place that uses psycopg below its public API (its
generators, `Transformer`, two private names): the psycopg it runs on is the one both locks
pin, and every name it relies on is there. A psycopg upgrade fails here first, pointing at the
module and at tests/db/test_pg_prepared.py, which holds its answers to a cursor's."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import psycopg.generators
from psycopg import adapt, pq

from telemetry.ingest import pg_prepared

ROOT = Path(__file__).resolve().parents[3]


def test_the_installed_psycopg_is_the_one_both_locks_pin() -> None:
    for lock in ("requirements.lock", "requirements-dev.lock"):
        pins = re.findall(r"^psycopg(?:-binary)?==(\S+)", (ROOT / lock).read_text(), re.M)
        assert pins and set(pins) == {psycopg.__version__}, (lock, pins, psycopg.__version__)


def test_every_name_below_the_public_api_exists() -> None:
    for name in pg_prepared.BELOW_PUBLIC_API:
        owner, _, attribute = name.rpartition(".")
        target = {
            "psycopg.generators": psycopg.generators,
            "psycopg.adapt": adapt,
            "psycopg.Connection": psycopg.Connection,
            "psycopg.pq.PGconn": pq.PGconn,
        }[owner]
        assert hasattr(target, attribute), name
