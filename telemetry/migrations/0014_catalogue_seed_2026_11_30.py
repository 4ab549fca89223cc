"""The catalogue as priced on 2026-11-30, for databases that 0004 seeded with its frozen rows.

Migration 0004 once ran the live seed (`telemetry.catalogue.seed_catalogue`), so a fresh
database got whatever the catalogue held on the day it migrated; 0004 now writes out the rows of
its own day, and this migration adds what the seed gained since: the Claude 5 family, Opus
4.7/4.8 and GPT-5.4/5.5 (missing rows only), and the flat 1M pricing of Opus 4.6 and Sonnet 4.6
(their long-context band cleared only where a row still holds 0004's values, so an admin's edit
stays). With 0008 in between, a fresh `migrate` ends where `seed_catalogue()` of this day does
(`tests/db/test_migrations.py`). Frozen like 0004: a later catalogue change is a new migration
or, for missing rows, `ensure_defaults`.
"""

from decimal import Decimal

from django.db import migrations

COLUMNS = (
    "model",
    "provider",
    "family",
    "window_tokens",
    "max_window_tokens",
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
ADDED = (
    ("claude-fable-5-1", "anthropic", "claude-fable-5-1", 1_000_000, None, "10", "50", "0.25", "12.50", "20", None, None, None, None, None, None),
    ("claude-fable-5", "anthropic", "claude-fable-5", 1_000_000, None, "10", "50", "1", "12.50", "20", None, None, None, None, None, None),
    ("claude-mythos-5-1", "anthropic", "claude-mythos-5-1", 1_000_000, None, "10", "50", "0.25", "12.50", "20", None, None, None, None, None, None),
    ("claude-mythos-5", "anthropic", "claude-mythos-5", 1_000_000, None, "10", "50", "1", "12.50", "20", None, None, None, None, None, None),
    ("claude-opus-5-5", "anthropic", "claude-opus-5-5", 1_000_000, None, "4", "20", "0.20", "5.00", "8", None, None, None, None, None, None),
    ("claude-opus-5", "anthropic", "claude-opus-5", 1_000_000, None, "5", "25", "0.5", "6.25", "10", None, None, None, None, None, None),
    ("claude-sonnet-5-5", "anthropic", "claude-sonnet-5-5", 1_000_000, None, "2", "10", "0.10", "2.50", "4", None, None, None, None, None, None),
    ("claude-sonnet-5", "anthropic", "claude-sonnet-5", 1_000_000, None, "2", "10", "0.2", "2.50", "4", None, None, None, None, None, None),
    ("claude-haiku-5-5", "anthropic", "claude-haiku-5-5", 1_000_000, None, "0.10", "0.50", "0.010", "0.1250", "0.20", 100_000, "0.50", "2.50", "0.050", "0.6250", "1.00"),
    ("claude-opus-4-8", "anthropic", "claude-opus-4-8", 200_000, 1_000_000, "5", "25", "0.5", "6.25", "10", None, None, None, None, None, None),
    ("claude-opus-4-7", "anthropic", "claude-opus-4-7", 200_000, 1_000_000, "5", "25", "0.5", "6.25", "10", None, None, None, None, None, None),
    ("gpt-5.5", "openai", "gpt-5.5", 1_050_000, None, "5", "30", "0.50", None, None, None, None, None, None, None, None),
    ("gpt-5.4", "openai", "gpt-5.4", 1_050_000, None, "2.50", "15", "0.25", None, None, None, None, None, None, None, None),
)

# model: 0004's long-context band (threshold, input, output, cache read, 5m write, 1h write)
FLAT_NOW = {
    "claude-opus-4-6": (200_000, "10", "37.50", "1.0", "12.50", "20"),
    "claude-sonnet-4-6": (200_000, "6", "22.50", "0.6", "7.50", "12"),
}
# fmt: on
BAND = (
    "long_context_threshold",
    "lc_input",
    "lc_output",
    "lc_cache_read",
    "lc_cache_write_5m",
    "lc_cache_write_1h",
)


def forward(apps, schema_editor):
    Catalogue = apps.get_model("telemetry", "CatalogueModel")
    existing = set(Catalogue.objects.values_list("model", flat=True))
    rows = []
    for values in ADDED:
        row = dict(zip(COLUMNS, values, strict=True))
        if row["model"] in existing:
            continue
        for name in PRICES:
            if row[name] is not None:
                row[name] = Decimal(row[name])
        rows.append(Catalogue(**row))
    Catalogue.objects.bulk_create(rows)
    for model, band in FLAT_NOW.items():
        seeded = {"long_context_threshold": band[0]}
        seeded.update(
            {name: Decimal(value) for name, value in zip(BAND[1:], band[1:], strict=True)}
        )
        Catalogue.objects.filter(model=model, **seeded).update(**dict.fromkeys(BAND))


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0013_rate_counts")]
    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
