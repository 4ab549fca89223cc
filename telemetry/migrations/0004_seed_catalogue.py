"""Seed the model catalogue with the list prices known when this ran (admins edit it later).

The rows are written out here as they were when this migration was added (commit 0886e0a), not
read from `telemetry.pricing`, so a later edit of the live catalogue never changes what this
migration does. Later seed rows come from `0014_catalogue_seed_2026_11_30` (fresh databases) and
`telemetry.seeding.ensure_defaults` (which `make run` calls: it adds missing rows, never edits).
"""

from decimal import Decimal

from django.db import migrations

COLUMNS = (
    "model",
    "provider",
    "family",
    "window_tokens",
    "input",
    "output",
    "cache_read",
    "cache_write_5m",
    "cache_write_1h",
    "long_context_threshold",
    "lc_input",
    "lc_output",
    "lc_cache_read",
    "lc_cache_write_5m",
    "lc_cache_write_1h",
)
PRICES = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
PRICES = PRICES + tuple(f"lc_{name}" for name in PRICES)

# $ per million tokens, as strings (exact decimals)
# fmt: off
ROWS = (
    ("claude-opus-4-6", "anthropic", "claude-opus-4-6", 200_000, "5", "25", "0.5", "6.25", "10", 200_000, "10", "37.50", "1.0", "12.50", "20"),
    ("claude-opus-4-5", "anthropic", "claude-opus-4-5", 200_000, "5", "25", "0.5", "6.25", "10", None, None, None, None, None, None),
    ("claude-opus-4-1", "anthropic", "claude-opus-4-1", 200_000, "15", "75", "1.5", "18.75", "30", None, None, None, None, None, None),
    ("claude-opus-4", "anthropic", "claude-opus-4", 200_000, "15", "75", "1.5", "18.75", "30", None, None, None, None, None, None),
    ("claude-sonnet-4-6", "anthropic", "claude-sonnet-4-6", 200_000, "3", "15", "0.3", "3.75", "6", 200_000, "6", "22.50", "0.6", "7.50", "12"),
    ("claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", 200_000, "3", "15", "0.3", "3.75", "6", 200_000, "6", "22.50", "0.6", "7.50", "12"),
    ("claude-sonnet-4", "anthropic", "claude-sonnet-4", 200_000, "3", "15", "0.3", "3.75", "6", 200_000, "6", "22.50", "0.6", "7.50", "12"),
    ("claude-3-7-sonnet", "anthropic", "claude-3-7-sonnet", 200_000, "3", "15", "0.3", "3.75", "6", None, None, None, None, None, None),
    ("claude-haiku-4-5", "anthropic", "claude-haiku-4-5", 200_000, "1", "5", "0.1", "1.25", "2", None, None, None, None, None, None),
    ("claude-3-5-haiku", "anthropic", "claude-3-5-haiku", 200_000, "0.80", "4", "0.080", "1.0000", "1.60", None, None, None, None, None, None),
    ("claude-3-haiku", "anthropic", "claude-3-haiku", 200_000, "0.25", "1.25", "0.025", "0.3125", "0.50", None, None, None, None, None, None),
    ("gpt-5.2", "openai", "gpt-5.2", 400_000, "1.75", "14", "0.175", None, None, None, None, None, None, None, None),
    ("gpt-5.1", "openai", "gpt-5.1", 400_000, "1.25", "10", "0.125", None, None, None, None, None, None, None, None),
    ("gpt-5", "openai", "gpt-5", 400_000, "1.25", "10", "0.125", None, None, None, None, None, None, None, None),
    ("gpt-5-mini", "openai", "gpt-5-mini", 400_000, "0.25", "2", "0.025", None, None, None, None, None, None, None, None),
    ("gpt-5-nano", "openai", "gpt-5-nano", 400_000, "0.05", "0.40", "0.005", None, None, None, None, None, None, None, None),
    ("gpt-4.1", "openai", "gpt-4.1", 1_047_576, "2", "8", "0.50", None, None, None, None, None, None, None, None),
    ("gpt-4.1-mini", "openai", "gpt-4.1-mini", 1_047_576, "0.40", "1.60", "0.10", None, None, None, None, None, None, None, None),
    ("gpt-4.1-nano", "openai", "gpt-4.1-nano", 1_047_576, "0.10", "0.40", "0.025", None, None, None, None, None, None, None, None),
    ("gpt-4o", "openai", "gpt-4o", 128_000, "2.50", "10", "1.25", None, None, None, None, None, None, None, None),
    ("gpt-4o-2024-05-13", "openai", "gpt-4o", 128_000, "5", "15", "5", None, None, None, None, None, None, None, None),
    ("gpt-4o-mini", "openai", "gpt-4o-mini", 128_000, "0.15", "0.60", "0.075", None, None, None, None, None, None, None, None),
    ("o3", "openai", "o3", 200_000, "2", "8", "0.50", None, None, None, None, None, None, None, None),
    ("o4-mini", "openai", "o4-mini", 200_000, "1.10", "4.40", "0.275", None, None, None, None, None, None, None, None),
    ("o3-mini", "openai", "o3-mini", 200_000, "1.10", "4.40", "0.55", None, None, None, None, None, None, None, None),
    ("o1", "openai", "o1", 200_000, "15", "60", "7.50", None, None, None, None, None, None, None, None),
)
# fmt: on


def seed(apps, schema_editor):
    Catalogue = apps.get_model("telemetry", "CatalogueModel")
    existing = set(Catalogue.objects.values_list("model", flat=True))
    rows = []
    for values in ROWS:
        row = dict(zip(COLUMNS, values, strict=True))
        if row["model"] in existing:
            continue
        for name in PRICES:
            if row[name] is not None:
                row[name] = Decimal(row[name])
        rows.append(Catalogue(**row))
    Catalogue.objects.bulk_create(rows)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0003_sessions_calls_turns_catalogue")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
