"""The Codex models (priced as of 2026-12-03), for databases seeded before the catalogue had them.

Codex CLI rollouts name `gpt-5-codex` and its successors; without rows their calls were all
unpriced. Missing rows only (an admin's row of the same name stays). Frozen: the figures are
those of `telemetry.pricing.SEED_CATALOGUE` on that day (sources cited there).
"""

from decimal import Decimal

from django.db import migrations

# model, window, input, cached input, output ($ per million tokens)
# fmt: off
ADDED = (
    ("gpt-5.3-codex", 400_000, "1.75", "0.175", "14"),
    ("gpt-5.2-codex", 400_000, "1.75", "0.175", "14"),
    ("gpt-5.1-codex-max", 400_000, "1.25", "0.125", "10"),
    ("gpt-5.1-codex", 400_000, "1.25", "0.125", "10"),
    ("gpt-5.1-codex-mini", 400_000, "0.25", "0.025", "2"),
    ("gpt-5-codex", 400_000, "1.25", "0.125", "10"),
    ("codex-mini-latest", 200_000, "1.50", "0.375", "6"),
)
# fmt: on


def forward(apps, schema_editor):
    Catalogue = apps.get_model("telemetry", "CatalogueModel")
    existing = set(Catalogue.objects.values_list("model", flat=True))
    Catalogue.objects.bulk_create(
        Catalogue(
            model=model,
            provider="openai",
            family=model,
            window_tokens=window,
            input=Decimal(input_price),
            output=Decimal(output),
            cache_read=Decimal(cached),
        )
        for model, window, input_price, cached, output in ADDED
        if model not in existing
    )


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0020_policy_relief_hysteresis")]
    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
