"""A call's raw usage is NULL where its buckets say all of it (`telemetry.usage_forms`).

The existing rows are rewritten in batches of `BATCH` calls, each its own transaction (the
migration is not atomic), so a large calls table is never locked whole and an interrupted run
picks up where it stopped when run again. Reversible: the reverse writes the derived usage back.
The rule is frozen here as it stood when the migration was written (a migration never imports the
live code, which may change after it); tests/db/test_migrations.py proves it equal to
`telemetry.usage_forms` on boundary examples.
On PostgreSQL the rewritten rows leave dead versions for VACUUM (autovacuum takes them) to
free; docs/operating.md says when to run VACUUM FULL instead.
"""

from collections.abc import Mapping
from typing import Any

from django.db import migrations, models, transaction

BATCH = 5_000
_BUCKETS = ("uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output")


def derived_usage(
    provider: str, uncached: int, read: int, write_5m: int, write_1h: int, output: int
) -> dict[str, int] | None:
    """Frozen `telemetry.usage_forms.derived_usage`."""
    if provider != "anthropic":
        return None
    return {
        "input_tokens": uncached,
        "output_tokens": output,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_5m + write_1h,
    }


def stored_usage(provider: str, usage: Mapping[str, Any], *buckets: int) -> Any:
    """Frozen `telemetry.usage_forms.stored_usage`."""
    derived = derived_usage(provider, *buckets)
    if derived is None or len(usage) != len(derived):
        return usage
    for key, value in derived.items():
        given = usage.get(key)
        if type(given) is not int or given != value:
            return usage
    return None


def _batches(calls: Any, has_usage: bool) -> Any:
    last = 0
    rows = calls.filter(raw_usage__isnull=not has_usage).order_by("pk")
    while True:
        chunk = list(
            rows.filter(pk__gt=last).values_list("pk", "provider", "raw_usage", *_BUCKETS)[:BATCH]
        )
        if not chunk:
            return
        last = chunk[-1][0]
        yield chunk


def forward(apps: Any, schema_editor: Any) -> None:
    calls = apps.get_model("telemetry", "LLMCall").objects.using(schema_editor.connection.alias)
    for chunk in _batches(calls.filter(provider="anthropic"), True):
        derivable = [
            pk
            for pk, provider, raw, *counts in chunk
            if isinstance(raw, dict) and stored_usage(provider, raw, *counts) is None
        ]
        if derivable:
            with transaction.atomic(using=schema_editor.connection.alias):
                calls.filter(pk__in=derivable).update(raw_usage=None)


def backward(apps: Any, schema_editor: Any) -> None:
    calls = apps.get_model("telemetry", "LLMCall").objects.using(schema_editor.connection.alias)
    for chunk in _batches(calls, False):
        with transaction.atomic(using=schema_editor.connection.alias):
            for pk, provider, _, *counts in chunk:
                calls.filter(pk=pk).update(raw_usage=derived_usage(provider, *counts) or {})


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("telemetry", "0025_session_metadata"),
    ]

    operations = [
        migrations.AlterField(
            model_name="llmcall",
            name="raw_usage",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(forward, backward, elidable=True),
    ]
