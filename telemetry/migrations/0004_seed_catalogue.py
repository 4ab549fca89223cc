"""Seed the model catalogue with the list prices known when this ran (admins edit it later)."""

from django.db import migrations


def seed(apps, schema_editor):
    from telemetry.catalogue import seed_catalogue

    seed_catalogue(apps.get_model("telemetry", "CatalogueModel"))


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_sessions_calls_turns_catalogue")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
