"""A call's token and character counts, and a turn's last call's, as `integer` (int4), not `bigint`.

Four bytes a column where eight were: with PostgreSQL's alignment about 36 bytes a call and 8 a
turn (docs/scaling.md). Every door refuses a count above 2**31 - 1 by name
(`telemetry.usage.MAX_STORED_COUNT`); a turn's sums stay `bigint`.

On PostgreSQL each table is converted by one `ALTER TABLE` (one rewrite under its lock, however
many columns); it fails, changing nothing, should a stored count not fit (none can have come
through the API, whose limits a real request is far below). SQLite stores both types alike
(INTEGER), so only the state changes there. Reversible.
"""

from typing import Any

from django.db import migrations, models

CALL_COLUMNS = (
    "uncached_input",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "output",
    "reasoning_output",
    "context_tokens",
    "request_chars",
    "appended_chars",
    "provider_missed_tokens",
)
TURN_COLUMNS = (
    "last_call_context_tokens",
    "last_call_output",
    "last_call_reasoning_output",
    "last_call_appended_chars",
)
NULLABLE = frozenset(
    {
        "reasoning_output",
        "request_chars",
        "appended_chars",
        "provider_missed_tokens",
        "last_call_reasoning_output",
        "last_call_appended_chars",
    }
)
TABLES = (("telemetry_llmcall", CALL_COLUMNS), ("telemetry_turn", TURN_COLUMNS))


def _alter(schema_editor: Any, kind: str) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, columns in TABLES:
        changes = ", ".join(f"ALTER COLUMN {c} TYPE {kind}" for c in columns)
        schema_editor.execute(f"ALTER TABLE {table} {changes}")


def forward(apps: Any, schema_editor: Any) -> None:
    _alter(schema_editor, "integer")


def backward(apps: Any, schema_editor: Any) -> None:
    _alter(schema_editor, "bigint")


def _field(name: str, kind: Any) -> Any:
    return kind(null=True, blank=True) if name in NULLABLE else kind()


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0030_policy_log_retention"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name=model, name=name, field=_field(name, models.IntegerField)
                )
                for model, columns in (("llmcall", CALL_COLUMNS), ("turn", TURN_COLUMNS))
                for name in columns
            ],
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
        ),
    ]
