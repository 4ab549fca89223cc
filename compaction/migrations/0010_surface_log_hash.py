from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("compaction", "0009_surface_seqs"),
    ]

    operations = [
        migrations.AddField(
            model_name="surface",
            name="log_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
    ]
