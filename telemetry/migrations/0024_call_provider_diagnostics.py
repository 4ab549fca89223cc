"""A call keeps what the provider said about its prompt cache (`telemetry.cache_diagnostics`):
the provider's word, the tokens it says missed, and its diagnostics object verbatim."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0023_overview_active_sessions"),
    ]

    operations = [
        migrations.AddField(
            model_name="llmcall",
            name="provider_diagnostics",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="llmcall",
            name="provider_miss_type",
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="llmcall",
            name="provider_missed_tokens",
            field=models.BigIntegerField(blank=True, null=True),
        ),
    ]
