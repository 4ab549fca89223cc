"""A turn key names its session without a database constraint and without an index of its own,
as calls and turns do (`LLMCall.session`): each new key of an OTLP export queued a check of its
session for COMMIT, and `turn_key_unique` (session, key) already serves every read by session.
The ORM's delete of a session still deletes its keys (tests/db/test_session_children.py).
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0033_session_relief_candidates"),
    ]

    operations = [
        migrations.AlterField(
            model_name="turnkey",
            name="session",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="turn_keys",
                to="telemetry.agentsession",
            ),
        ),
    ]
