"""Idle sessions' calls and turns stored packed on PostgreSQL (`telemetry.packing`): the
tables become `<table>_hot`, each gains a `<table>_packed` beside it, and the model's name a
view over the two. A context event's link to its call loses its database constraint: a
packed call is a row of the view, which no constraint can name (the ORM still sets the link
to NULL when its call is removed). Nothing changes on SQLite.
"""

import django.db.models.deletion
from django.db import migrations, models

from telemetry import packing


def _models(apps):  # the models as this migration knows them
    return [apps.get_model(*p.label.split(".")) for p in packing.PACKED], apps.get_model(
        *packing.SESSION_LABEL.split(".")
    )


def install(apps, schema_editor):
    models_, session = _models(apps)
    packing.install(schema_editor, models_, session)


def uninstall(apps, schema_editor):
    models_, session = _models(apps)
    packing.uninstall(schema_editor, models_, session)


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0034_turn_key_session_unconstrained"),
    ]

    operations = [
        migrations.AlterField(
            model_name="contextevent",
            name="call",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="context_events",
                to="telemetry.llmcall",
            ),
        ),
        migrations.RunPython(install, uninstall),
    ]
