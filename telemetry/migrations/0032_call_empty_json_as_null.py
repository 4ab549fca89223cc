"""A call without flags stores NULL, not `[]`; an absent prefix or diagnostics NULL, not JSON null.

`[]` took five bytes a row and a JSON `null` nine; almost every call has neither flags nor a
prefix nor the provider's diagnostics. Readers see no difference: the ORM reads a NULL flags
column as `[]` (`telemetry.models.FlagList`) and a NULL prefix or diagnostics as None, as it
read JSON null (COPY and the single-record statement wrote JSON null where the ORM wrote NULL).

The rows are rewritten in id ranges of `BATCH`, each its own transaction (the migration is not
atomic), so a large calls table is never locked whole and an interrupted run picks up where it
stopped when run again. The rewritten rows leave dead versions for VACUUM to reuse;
docs/operating.md says when to run VACUUM FULL instead. Reversible: the reverse writes `[]`
back (an absent prefix or diagnostics stays NULL, as the ORM always stored it).
"""

from typing import Any

from django.db import migrations, models, transaction

BATCH = 50_000
TABLE = "telemetry_llmcall"
# The same SQL on PostgreSQL (the literals are jsonb there) and SQLite (JSON is text there).
EMPTY = "flags = '[]' OR prefix = 'null' OR provider_diagnostics = 'null'"
FORWARD = (
    f"UPDATE {TABLE} SET flags = CASE WHEN flags = '[]' THEN NULL ELSE flags END, "
    "prefix = CASE WHEN prefix = 'null' THEN NULL ELSE prefix END, "
    "provider_diagnostics = CASE WHEN provider_diagnostics = 'null' THEN NULL "
    "ELSE provider_diagnostics END "
    f"WHERE id > %s AND id <= %s AND ({EMPTY})"
)
BACKWARD = f"UPDATE {TABLE} SET flags = '[]' WHERE id > %s AND id <= %s AND flags IS NULL"


def _in_ranges(schema_editor: Any, sql: str) -> None:
    alias = schema_editor.connection.alias
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT min(id), max(id) FROM {TABLE}")
        low, high = cursor.fetchone()
    if low is None:
        return
    start = low - 1
    while start < high:
        with transaction.atomic(using=alias), schema_editor.connection.cursor() as cursor:
            cursor.execute(sql, [start, start + BATCH])
        start += BATCH


def forward(apps: Any, schema_editor: Any) -> None:
    _in_ranges(schema_editor, FORWARD)


def backward(apps: Any, schema_editor: Any) -> None:
    _in_ranges(schema_editor, BACKWARD)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("telemetry", "0031_call_counts_integer"),
    ]

    operations = [
        migrations.AlterField(
            model_name="llmcall",
            name="flags",
            field=models.JSONField(blank=True, default=list, null=True),
        ),
        migrations.RunPython(forward, backward, elidable=False),
    ]
