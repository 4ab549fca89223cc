"""Two partial indexes of relief's candidates (`compaction.relief_state.candidates`): the
sessions over a threshold that have a transcript, by profile and pressure, and those whose
relief was asked for. The overview's and /metrics' relief counts and the sessions list's relief
filters read them as a bitmap OR, a few entries each, instead of every session. Both hold only
the sessions that can be in relief, so they stay small whatever the fleet.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0032_call_empty_json_as_null"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="agentsession",
            index=models.Index(
                condition=models.Q(("surface_version__gt", 0)),
                fields=["profile", "pressure"],
                name="session_relief_over",
            ),
        ),
        migrations.AddIndex(
            model_name="agentsession",
            index=models.Index(
                condition=models.Q(("relief_requested_at__isnull", False)),
                fields=["id"],
                name="session_relief_asked",
            ),
        ),
    ]
