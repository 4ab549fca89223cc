"""A BRIN index on turns' `last_at` for the retention scan (`telemetry.retention`), PostgreSQL only.

Turns are written as their calls arrive, so the table's pages follow `last_at` closely and a
block-range summary (a few kilobytes whatever the fleet) lets the scan for turns older than a
cut-off read only the old ranges. A B-tree would serve the same query at about ten bytes per
call (make bench BENCH_SCALE=fleet); BRIN costs next to nothing to keep up on ingest. SQLite has
no BRIN and gets no index: its scan reads the table, as it did.
"""

from typing import Any

from django.db import migrations

NAME = "turn_last_at_brin"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {NAME} ON telemetry_turn USING brin (last_at)"
        )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {NAME}")


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0027_session_tags"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
