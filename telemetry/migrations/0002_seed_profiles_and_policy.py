"""Seed the global policy with the defaults and the `default`, `fleet` and `desktop` profiles.

Values are written out here (not imported) so the migration stays what it was when it ran.
D7: `fleet` and `desktop` get the 1-hour cache TTL tier; everything else inherits `5m`.
"""

from django.db import migrations

GLOBAL_DEFAULTS = {
    "cache_ttl": "5m",
    "prune_threshold": 0.60,
    "summarize_threshold": 0.80,
    "keep_rounds": 4,
    "keep_rounds_verbatim": 4,
    "stub_head_chars": 400,
    "stub_tail_chars": 200,
    "max_result_chars": 50_000,
    "prune_min_free_tokens": 4_000,
    "prune_exclude_tools": [],
    "summary_max_tokens": 2_000,
    "reserved_output_tokens": 16_000,
    "round_soft_limit": 40,
    "nudge_text": (
        "You have taken many steps in this turn. Pause and re-read your instructions and plan: "
        "restate the goal, what is done, and the next step before calling more tools."
    ),
    "round_hard_cap": 100,
    "archive_retention_days": 90,
}
PROFILES = {
    "default": ("Agents without a more specific profile.", None),
    "fleet": ("Long-running fleet agents (1-hour cache tier, D7).", "1h"),
    "desktop": ("Desktop agents with human-paced gaps (1-hour cache tier, D7).", "1h"),
}


def seed(apps, schema_editor):
    Policy = apps.get_model("telemetry", "Policy")
    AgentProfile = apps.get_model("telemetry", "AgentProfile")
    if not Policy.objects.filter(is_global=True).exists():
        Policy.objects.create(is_global=True, **GLOBAL_DEFAULTS)
    for name, (description, ttl) in PROFILES.items():
        profile, _ = AgentProfile.objects.get_or_create(
            name=name, defaults={"description": description}
        )
        if ttl and not Policy.objects.filter(profile=profile).exists():
            Policy.objects.create(profile=profile, cache_ttl=ttl)


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
