"""Drop the calls' and turns' own `session_id` indexes: their unique constraints lead with
`session_id` and serve every lookup by session, and each inserted call or turn paid for the
second index. Only the indexes go (`DROP INDEX`, the same name on PostgreSQL and SQLite): an
`AlterField` would have dropped and re-validated the foreign keys on PostgreSQL (a scan of
every call) and rebuilt both tables on SQLite."""

import django.db.models.deletion
from django.db import migrations, models

_INDEXES = (
    ("telemetry_llmcall", "telemetry_llmcall_session_id_717a7ddb"),
    ("telemetry_turn", "telemetry_turn_session_id_0dc220cc"),
)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0017_hourly_usage_stripes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("session_id")',
                )
                for table, index in _INDEXES
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="llmcall",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="calls",
                        to="telemetry.agentsession",
                    ),
                ),
                migrations.AlterField(
                    model_name="turn",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="turns",
                        to="telemetry.agentsession",
                    ),
                ),
            ],
        ),
    ]
