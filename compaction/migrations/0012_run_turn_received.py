from typing import Any

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def backfill(apps: Any, schema_editor: Any) -> None:
    """The applied runs before this field: the last turn of a call the server had received
    (`received_at`, its clock) by the time the run finished (its clock too)."""
    run = apps.get_model("compaction", "CompactionRun")
    call = apps.get_model("telemetry", "LLMCall")
    received = (
        call.objects.filter(
            session_id=OuterRef("session_id"), received_at__lte=OuterRef("finished_at")
        )
        .order_by("-turn")
        .values("turn")[:1]
    )
    run.objects.filter(status="applied", finished_at__isnull=False).update(
        turn_received=Subquery(received)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0011_surface_log_hash"),
        ("telemetry", "0021_catalogue_codex_models"),
    ]

    operations = [
        migrations.AddField(
            model_name="compactionrun",
            name="turn_received",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
