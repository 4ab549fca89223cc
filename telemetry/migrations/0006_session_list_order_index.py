"""An index for the console's session list order: last_seen_at DESC NULLS LAST, id DESC.

The model's `session_last_seen` index (DESC, NULLs first on PostgreSQL) cannot serve that
order, so a 5,000-session list was a full sort. SQLite has no NULLS LAST in indexes, but its
NULLs sort lowest, so a plain DESC index already puts them last there.
"""

from django.db import migrations

NAME = "session_list_order"


def forward(apps, schema_editor):
    nulls = " NULLS LAST" if schema_editor.connection.vendor == "postgresql" else ""
    schema_editor.execute(
        f"CREATE INDEX {NAME} ON telemetry_agentsession (last_seen_at DESC{nulls}, id DESC)"
    )


def backward(apps, schema_editor):
    schema_editor.execute(f"DROP INDEX IF EXISTS {NAME}")


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0005_relief_tried_version")]
    operations = [migrations.RunPython(forward, backward)]
