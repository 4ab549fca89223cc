"""`DATABASE_POOLER=pgbouncer-transaction` and `DATABASE_REPLICA_URL` (docs/scaling.md): what
the settings make of them, and the compaction lock the switch takes instead of a session one.

The suites themselves run through a real PgBouncer in `make test` (scripts/pgbouncer_stage.py).
"""

from __future__ import annotations

import os
import runpy
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

import console.settings
from compaction.services import LOCK_CLASS, compaction_lock

PG = "postgres://u@db.example:5432/console"
SETTINGS = Path(console.settings.__file__)


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """The module `console.settings` evaluated afresh under `env` (the DATABASE_*/DB_* variables
    of this process left out); the running settings are untouched."""
    with monkeypatch.context() as patched:
        for name in os.environ:
            if name.startswith(("DATABASE_", "DB_")):
                patched.delenv(name)
        for name, value in env.items():
            patched.setenv(name, value)
        return runpy.run_path(str(SETTINGS), run_name="console_settings_under_test")


def _database(values: dict[str, Any]) -> tuple[Any, ...]:
    default = values["DATABASES"]["default"]
    cursors = default.get("DISABLE_SERVER_SIDE_CURSORS", False)
    return cursors, values["DB_PREPARED_STATEMENTS"], values["DB_PIPELINE"]


def test_the_switch_turns_off_what_only_holds_on_one_server_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _database(_settings(monkeypatch, DATABASE_URL=PG)) == (False, True, True)
    pooled = _settings(monkeypatch, DATABASE_URL=PG, DATABASE_POOLER="pgbouncer-transaction")
    assert _database(pooled) == (True, False, False)
    # a PgBouncer >= 1.21 with max_prepared_statements: turned back on explicitly
    newer = _settings(
        monkeypatch,
        DATABASE_URL=PG,
        DATABASE_POOLER="pgbouncer-transaction",
        DB_PREPARED_STATEMENTS="true",
    )
    assert _database(newer) == (True, True, False)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DATABASE_POOLER": "pgbouncer-transaction"}, "needs a PostgreSQL DATABASE_URL"),
        (
            {
                "DATABASE_URL": PG,
                "DATABASE_POOLER": "pgbouncer-transaction",
                "DB_SERVER_SIDE_BINDING": "true",
            },
            "DB_SERVER_SIDE_BINDING",
        ),
        ({"DATABASE_URL": PG, "DATABASE_POOLER": "pgbouncer"}, "DATABASE_POOLER must be one of"),
        ({"DATABASE_URL": PG, "DATABASE_REPLICA_URL": "mysql://x/y"}, "DATABASE_REPLICA_URL"),
    ],
)
def test_settings_refuse_what_cannot_work(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        _settings(monkeypatch, **env)


def test_a_replica_url_adds_a_mirrored_alias_the_router_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = _settings(
        monkeypatch, DATABASE_URL=PG, DATABASE_REPLICA_URL="postgres://u@replica.example/c"
    )
    databases = values["DATABASES"]
    assert sorted(databases) == ["default", "replica"] and values["REPLICA_DATABASE"] == "replica"
    assert databases["replica"]["TEST"] == {"MIRROR": "default"}
    assert databases["replica"]["HOST"] == "replica.example"
    assert databases["replica"]["ENGINE"] == databases["default"]["ENGINE"]
    assert _settings(monkeypatch, DATABASE_URL=PG)["REPLICA_DATABASE"] is None


def _holder_count(session_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objsubid = 2 AND classid = %s AND objid = %s",
            [LOCK_CLASS, session_id],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's advisory locks")
@pytest.mark.django_db(transaction=True)
def test_behind_the_pooler_the_compaction_lock_is_one_transactions_and_shows_in_pg_locks(
    settings: object,
) -> None:
    settings.DATABASE_POOLER = "pgbouncer-transaction"  # type: ignore[attr-defined]
    seen: list[bool] = []

    def second() -> None:
        try:
            with compaction_lock(4242) as acquired:
                seen.append(acquired)
        finally:
            connection.close()

    with compaction_lock(4242) as acquired:
        assert acquired
        # what compaction.recovery reads: the lock is held, by a connection of its own
        assert _holder_count(4242) == 1
        thread = threading.Thread(target=second)
        thread.start()
        thread.join(30)
        assert seen == [False]
    assert _holder_count(4242) == 0  # released when the compaction ends
    with compaction_lock(4242) as again:
        assert again
