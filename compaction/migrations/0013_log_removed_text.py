"""Log retention (issue 35): a log message records when its text was removed and the archive
that holds it, and the partial index `log_removed_archive` finds a session's removed messages.

On PostgreSQL the index is built CONCURRENTLY (the migration is not atomic), so appends to the
log go on while it is built; SQLite builds it plainly. The two columns are nullable without a
default: adding them rewrites no row (the foreign key's check reads the table once, all NULL).
If a concurrent build is interrupted, PostgreSQL leaves an invalid index behind: drop it
(`DROP INDEX CONCURRENTLY log_removed_archive`) and migrate again.

This migration was edited in place (it first built the index in one transaction) before any
release held it: a database that applied the earlier form has the same columns and the same
index under the same name, so it needs nothing run again.
"""

from typing import Any

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
    """`AddIndexConcurrently` on PostgreSQL, a plain `AddIndex` elsewhere (SQLite)."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(
                self, app_label, schema_editor, from_state, to_state
            )

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(
                self, app_label, schema_editor, from_state, to_state
            )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("compaction", "0012_run_turn_received"),
    ]

    operations = [
        migrations.AddField(
            model_name="logmessage",
            name="archive",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.RESTRICT,
                related_name="only_copies",
                to="compaction.archive",
            ),
        ),
        migrations.AddField(
            model_name="logmessage",
            name="removed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="logmessage",
            index=models.Index(
                condition=models.Q(("archive__isnull", False)),
                fields=["session", "archive"],
                name="log_removed_archive",
            ),
        ),
    ]
