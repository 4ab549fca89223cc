"""A session keeps the totals of the turns call retention removed (`AgentSession.retired_totals`),
so re-deriving its figures from the turns it kept does not lose them."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0035_packed_calls_and_turns"),
    ]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="retired_totals",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
