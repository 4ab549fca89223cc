from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0009_surface_seqs"),
    ]

    operations = [
        migrations.AddField(
            model_name="logmessage",
            name="tool_chars",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
    ]
