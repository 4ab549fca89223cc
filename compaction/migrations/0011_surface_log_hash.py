from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0010_logmessage_tool_chars"),
    ]

    operations = [
        migrations.AddField(
            model_name="surface",
            name="log_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
