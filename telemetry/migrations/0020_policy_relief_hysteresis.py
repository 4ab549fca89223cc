"""The policy's relief_hysteresis: how far below prune_threshold automatic relief aims.

The global row gets the default written out (not imported, so the migration stays what it was
when it ran); profile rows keep NULL and inherit it.
"""

from django.db import migrations, models

DEFAULT_RELIEF_HYSTERESIS = 0.15


def seed(apps, schema_editor):
    Policy = apps.get_model("telemetry", "Policy")
    Policy.objects.filter(is_global=True, relief_hysteresis__isnull=True).update(
        relief_hysteresis=DEFAULT_RELIEF_HYSTERESIS
    )


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0019_calls_and_turns_without_session_constraint"),
    ]

    operations = [
        migrations.AddField(
            model_name="policy",
            name="relief_hysteresis",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
