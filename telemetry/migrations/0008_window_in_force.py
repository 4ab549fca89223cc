"""The window in force: the catalogue keeps a model's standard window and its opt-in maximum
apart; sessions say where their window came from and remember a limit learned from an overflow.

The data is frozen here (not read from `telemetry.pricing`), so this migration does the same
thing whenever it runs. A row whose window an admin already changed keeps the admin's value.
"""

from django.db import migrations, models

# model: (window seeded by 0004, standard window, opt-in maximum)
WINDOWS = {
    "claude-opus-4-8": (1_000_000, 200_000, 1_000_000),
    "claude-opus-4-7": (1_000_000, 200_000, 1_000_000),
    "claude-opus-4-6": (1_000_000, 200_000, 1_000_000),
    "claude-sonnet-4-6": (1_000_000, 200_000, 1_000_000),
    "claude-sonnet-4-5": (200_000, 200_000, 1_000_000),
    "claude-sonnet-4": (200_000, 200_000, 1_000_000),
}


def forward(apps, schema_editor):
    Catalogue = apps.get_model("telemetry", "CatalogueModel")
    for model, (seeded, standard, maximum) in WINDOWS.items():
        Catalogue.objects.filter(model=model, max_window_tokens__isnull=True).update(
            max_window_tokens=maximum
        )
        Catalogue.objects.filter(model=model, window_tokens=seeded).update(window_tokens=standard)


def backward(apps, schema_editor):
    Catalogue = apps.get_model("telemetry", "CatalogueModel")
    for model, (seeded, standard, _maximum) in WINDOWS.items():
        Catalogue.objects.filter(model=model, window_tokens=standard).update(window_tokens=seeded)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0007_context_events")]
    operations = [
        migrations.AddField(
            model_name="cataloguemodel",
            name="max_window_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="agentsession",
            name="window_source",
            field=models.CharField(blank=True, default="", max_length=20),
        ),
        migrations.AddField(
            model_name="agentsession",
            name="learned_window_tokens",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="agentsession",
            name="learned_window_model",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(forward, backward),
    ]
