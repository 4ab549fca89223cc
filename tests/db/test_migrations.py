"""Data migrations are frozen: they write out their rows and copy the code they run, so a later
edit of the live modules never changes what an old migration does. These tests replay them with
the historical models of their own day and compare the result with what the live code gives
(compaction 0004's frozen search terms are the oracle of `tests/unit/test_search_terms.py`)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.special import RunPython

from telemetry.catalogue import seed_catalogue
from telemetry.models import CatalogueModel, HourlyUsage
from telemetry.rollups import rebuild_rollups
from tests.db.test_rollups import START, _record, _snapshot

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("telemetry", "compaction", "console", "demo")

# Every telemetry migration that writes catalogue rows, in order.
CATALOGUE_STEPS = (
    "0004_seed_catalogue",
    "0008_window_in_force",
    "0014_catalogue_seed_2026_11_30",
    "0021_catalogue_codex_models",
)


def catalogue_rows() -> list[tuple[Any, ...]]:
    names = [
        f.attname
        for f in CatalogueModel._meta.concrete_fields
        if not f.primary_key and f.attname != "updated_at"
    ]
    return list(CatalogueModel.objects.order_by("model").values_list(*names))


def run_data_steps(loader: MigrationLoader, app: str, name: str) -> None:
    """Run one migration's RunPython steps against the models as they were after it."""
    state = loader.project_state((app, name), at_end=True)
    for operation in loader.get_migration(app, name).operations:
        if isinstance(operation, RunPython):
            # all the steps use of a schema editor (SQLite opens none inside a transaction)
            operation.code(state.apps, cast(Any, SimpleNamespace(connection=connection)))


def test_the_catalogue_migrations_are_the_only_ones_writing_catalogue_rows():
    loader = MigrationLoader(connection)
    writers = [
        name
        for (app, name), migration in sorted(loader.disk_migrations.items())
        if app == "telemetry"
        and any(
            isinstance(op, RunPython) and "CatalogueModel" in inspect.getsource(op.code)
            for op in migration.operations
        )
    ]
    assert tuple(writers) == CATALOGUE_STEPS


def test_a_fresh_migrate_seeds_the_catalogue_that_seed_catalogue_seeds_today():
    loader = MigrationLoader(connection)
    CatalogueModel.objects.all().delete()
    for name in CATALOGUE_STEPS:
        run_data_steps(loader, "telemetry", name)
    migrated = catalogue_rows()

    CatalogueModel.objects.all().delete()
    seed_catalogue()
    assert migrated == catalogue_rows()
    assert len(migrated) == 46


def test_the_catalogue_migrations_keep_what_an_admin_changed():
    loader = MigrationLoader(connection)
    CatalogueModel.objects.all().delete()
    run_data_steps(loader, "telemetry", "0004_seed_catalogue")
    CatalogueModel.objects.filter(model="claude-opus-4-6").update(lc_input="11")
    for name in CATALOGUE_STEPS[1:]:
        run_data_steps(loader, "telemetry", name)
    row = CatalogueModel.objects.get(model="claude-opus-4-6")
    assert (row.long_context_threshold, str(row.lc_input)) == (200_000, "11.000000")


def test_no_migration_imports_the_project_s_live_code():
    offenders = []
    for path in sorted(Path(settings.BASE_DIR).glob("*/migrations/0*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [
                f"{path.parent.parent.name}/migrations/{path.name}: {module}"
                for module in modules
                if module.split(".")[0] in PROJECT_APPS
            ]
    assert offenders == []


@contextmanager
def _as_before_packing() -> Iterator[None]:
    """The calls and turns as the migrations before 0035 left them (one table each, under the
    model's name), for a test of an older migration's steps: 0035 reversed, then applied again."""
    import importlib

    frozen = importlib.import_module("telemetry.migrations.0035_packed_calls_and_turns")

    def run(statements: list[str]) -> None:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                # the test's deferred checks run now: an ALTER TABLE waits for none
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                for statement in statements:
                    cursor.execute(statement)

    run(frozen.UNINSTALL)
    try:
        yield
    finally:
        run(frozen.INSTALL)


def test_the_frozen_rollup_backfill_of_0011_rebuilds_what_the_live_code_does(agent):
    records = [
        _record("a", 0, 0, START),
        _record("a", 0, 1, START + timedelta(minutes=1), output_tokens=7),
        _record("b", 0, 0, START + timedelta(hours=2), model="gpt-5", cache_read_input_tokens=0),
        _record("b", 1, 0, START + timedelta(hours=2, minutes=5), model="an-unpriced-model"),
    ]
    assert agent.post("/api/v1/telemetry", {"records": records}).status_code == 200
    rebuild_rollups()
    live = _snapshot()
    HourlyUsage.objects.all().delete()
    with _as_before_packing():
        run_data_steps(MigrationLoader(connection), "telemetry", "0011_hourly_usage")
    assert _snapshot() == live
    assert len(live) == 4  # (profile, model, hour) rows


def test_the_frozen_usage_rule_of_0026_is_the_live_one():
    """0026 keeps its own copy of `telemetry.usage_forms` (migrations never import live code);
    on the rule's boundaries both copies decide alike."""
    import importlib

    from telemetry import usage_forms

    frozen = importlib.import_module("telemetry.migrations.0026_call_raw_usage_derived")
    buckets = [(0, 0, 0, 0, 0), (10, 20, 3, 4, 5), (1, 0, 0, 7, 2**53)]
    usages: list[dict[str, Any]] = [
        {},
        {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 20},
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 20,
            "cache_creation_input_tokens": 7,
        },
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 20,
            "cache_creation_input_tokens": 7.0,
        },
        {
            "input_tokens": True,
            "output_tokens": 5,
            "cache_read_input_tokens": 20,
            "cache_creation_input_tokens": 7,
        },
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 20,
            "cache_creation_input_tokens": 7,
            "service_tier": "standard",
        },
    ]
    for provider in ("anthropic", "openai", "openai-responses", "gemini"):
        for counts in buckets:
            assert frozen.derived_usage(provider, *counts) == usage_forms.derived_usage(
                provider, *counts
            )
            usages.append(usage_forms.derived_usage(provider, *counts) or {})
        for usage in usages:
            for counts in buckets:
                assert frozen.stored_usage(provider, usage, *counts) == usage_forms.stored_usage(
                    provider, usage, *counts
                ), (provider, usage, counts)


def test_the_frozen_digest_rule_of_0029_is_the_live_one():
    """0029 keeps its own copy of `telemetry.digests`; on boundary digests both agree, and the
    database's `decode(…, 'hex')` (PostgreSQL's conversion) gives the same bytes."""
    import hashlib
    import importlib

    from telemetry import digests

    frozen = importlib.import_module("telemetry.migrations.0029_call_payload_hash_bytes")
    texts = ["00" * 32, "ff" * 32, "AB" * 32, hashlib.sha256(b"x").hexdigest()]
    for text in texts:
        assert frozen.stored_from_hex(text) == digests.digest_from_text(text)
        assert frozen.hex_from_stored(frozen.stored_from_hex(text)) == text.lower()
        assert digests.digest_text(digests.digest_from_text(text)) == text.lower()
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT decode(%s, 'hex')", [text])
                assert bytes(cursor.fetchone()[0]) == digests.digest_from_text(text)
    assert digests.stored_digest(hashlib.sha256(b"x")) == frozen.stored_from_hex(texts[3])
    for bad in ("ab" * 31, "ab" * 33, "g" * 64):
        with pytest.raises(ValueError):
            frozen.stored_from_hex(bad)
        with pytest.raises(ValueError):
            digests.digest_from_text(bad)


def test_0029_turns_the_stored_hex_into_the_digest_s_bytes_and_back(agent):
    """Reverse then forward on stored calls: the reverse writes the hex the column held before,
    the forward the bytes ingest now stores; nothing else changes."""
    import importlib

    from telemetry.models import LLMCall

    for turn in range(3):
        assert agent.post("/api/v1/telemetry", _record("a", turn, 0, START)).status_code == 201
    stored = dict(LLMCall.objects.values_list("pk", "payload_hash"))
    assert len(stored) == 3 and all(len(bytes(d)) == 32 for d in stored.values())
    module = importlib.import_module("telemetry.migrations.0029_call_payload_hash_bytes")

    def execute(sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)

    editor = SimpleNamespace(connection=connection, execute=execute)

    def column() -> dict[int, Any]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, payload_hash FROM telemetry_llmcall")
            return dict(cursor.fetchall())

    with _as_before_packing():
        module.backward(None, editor)
        assert column() == {pk: bytes(d).hex() for pk, d in stored.items()}
        module.forward(None, editor)
        assert {pk: bytes(d) for pk, d in column().items()} == {
            pk: bytes(d) for pk, d in stored.items()
        }


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite stores int4 and int8 alike")
def test_0031_makes_a_calls_counts_integer_and_back_keeping_every_value(agent):
    import importlib

    from telemetry.models import LLMCall, Turn

    module = importlib.import_module("telemetry.migrations.0031_call_counts_integer")
    usage = {"input_tokens": 2**31 - 1 - 1050, "output_tokens": 2**31 - 1}  # + 1,050 cached
    assert agent.post("/api/v1/telemetry", _record("a", 0, 0, START, **usage)).status_code == 201
    assert agent.post("/api/v1/telemetry", _record("a", 1, 0, START)).status_code == 201

    def types() -> dict[tuple[str, str], str]:
        found = {}
        with connection.cursor() as cursor:
            for table, columns in module.TABLES:
                cursor.execute(
                    "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = %s::regclass AND attname = ANY(%s)",
                    [table, list(columns)],
                )
                found.update({(table, name): kind for name, kind in cursor.fetchall()})
        return found

    def rows() -> list[Any]:
        calls = LLMCall.objects.order_by("pk").values_list(*module.CALL_COLUMNS)
        turns = Turn.objects.order_by("pk").values_list(*module.TURN_COLUMNS)
        return [*calls, *turns]

    columns = len(module.CALL_COLUMNS) + len(module.TURN_COLUMNS)
    before = rows()
    assert before[0][module.CALL_COLUMNS.index("context_tokens")] == 2**31 - 1

    def execute(sql: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(sql)

    editor = SimpleNamespace(connection=connection, execute=execute)
    with _as_before_packing():
        assert set(types().values()) == {"integer"} and len(types()) == columns
        module.backward(None, editor)
        assert set(types().values()) == {"bigint"}
        assert rows() == before
        module.forward(None, editor)
        assert set(types().values()) == {"integer"}
        assert rows() == before


def _index_sql(name: str) -> str | None:
    """The definition of index `name` as the database holds it (None: no such index); on
    PostgreSQL only a valid one (a failed concurrent build leaves an invalid one)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "WHERE i.indexrelid = to_regclass(%s) AND i.indisvalid",
                [name],
            )
        else:
            cursor.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = %s", [name]
            )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def test_0013_builds_the_removed_text_index_concurrently_on_postgresql_and_plainly_elsewhere():
    loader = MigrationLoader(connection)
    migration = loader.get_migration("compaction", "0013_log_removed_text")
    assert migration.atomic is False
    (operation,) = [op for op in migration.operations if hasattr(op, "index")]
    before = loader.project_state(("compaction", "0012_run_turn_received"), at_end=True)
    after = before.clone()
    for op in migration.operations:
        op.state_forwards("compaction", after)
    # the migrated test database holds the index whole (on PostgreSQL: a valid one)
    built = _index_sql("log_removed_archive")
    assert built is not None and "archive_id" in built and "NOT NULL" in built.upper()
    # the statements it runs, collected on a connection of its own outside the test's
    # transaction (a concurrent build refuses to run inside one)
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with other.schema_editor(collect_sql=True, atomic=False) as editor:
            operation.database_forwards("compaction", editor, before, after)
            operation.database_backwards("compaction", editor, after, before)
        statements = [sql.upper() for sql in editor.collected_sql if "LOG_REMOVED" in sql.upper()]
    finally:
        other.close()
    assert [sql.split(" ")[0] for sql in statements] == ["CREATE", "DROP"], statements
    concurrently = ["CONCURRENTLY" in sql for sql in statements]
    assert concurrently == [connection.vendor == "postgresql"] * 2, statements


def test_the_frozen_packing_statements_of_0035_are_the_live_ones():
    """0035 writes out `telemetry.packing`'s statements for the models of its day; the live
    builders, given those historical models, still write the same text."""
    import importlib

    from telemetry import packing

    frozen = importlib.import_module("telemetry.migrations.0035_packed_calls_and_turns")
    state = MigrationLoader(connection).project_state(
        ("telemetry", "0034_turn_key_session_unconstrained")
    )
    models = [state.apps.get_model(p.label) for p in packing.PACKED]
    session = state.apps.get_model(packing.SESSION_LABEL)
    assert packing.install_statements(models, session) == frozen.INSTALL
    assert packing.uninstall_statements(models, session) == frozen.UNINSTALL
