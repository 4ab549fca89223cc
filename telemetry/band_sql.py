"""A session's pressure band as SQL: `telemetry.pressure.pressure_band` over stored pressure.

`band_ranges` is the one SQL form of the band rule: each band a range of pressure under one
profile's thresholds. The ranges are disjoint and cover every pressure (0 < prune ≤ summarize
≤ 1), so a band can be counted or filtered on an index of `(profile, pressure)` without a CASE
per session, and `band_case` builds the per-profile CASE (a band's name, rank or any label)
from the same ranges. tests/db/test_band_sql.py holds both to `pressure_band` at every
boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from django.db.models import Case, Field, Q, Value, When

from telemetry.policy_rules import PolicyValues
from telemetry.pressure import PressureBand

# The order the console lists them in; `BAND_OF_RANK` is the order it sorts them in.
BANDS: Final[tuple[PressureBand, ...]] = ("ok", "prune", "compact", "over", "unknown")
BAND_OF_RANK: Final[dict[int, PressureBand]] = {
    -1: "unknown",
    0: "ok",
    1: "prune",
    2: "compact",
    3: "over",
}
RANK_OF_BAND: Final[dict[PressureBand, int]] = {band: n for n, band in BAND_OF_RANK.items()}

# The bands no profile's thresholds move.
_FIXED: Final[tuple[PressureBand, ...]] = ("unknown", "over")
# The bands a profile's thresholds draw, and those of the fallback (its "ok" is the default).
_DRAWN: Final[tuple[PressureBand, ...]] = ("compact", "prune", "ok")
_FALLBACK: Final[tuple[PressureBand, ...]] = ("compact", "prune")


def band_ranges(prune: Any, summarize: Any) -> dict[str, Q]:
    """Each band as a range of pressure under one profile's thresholds (values or expressions)."""
    return {
        "ok": Q(pressure__lt=prune),
        "prune": Q(pressure__gte=prune, pressure__lt=summarize),
        "compact": Q(pressure__gte=summarize, pressure__lte=1.0),
        "over": Q(pressure__gt=1.0),
        "unknown": Q(pressure__isnull=True),
    }


def band_case(
    policies: Mapping[int, PolicyValues],
    *,
    fallback: PolicyValues,
    label: Callable[[PressureBand], Any],
    output_field: Field[Any, Any],
) -> Case:
    """A session's band, as `label(band)`, each profile under its own thresholds.

    A profile missing from `policies` (created after they were read) is under `fallback`.
    """
    fixed = band_ranges(None, None)
    whens = [When(fixed[band], then=Value(label(band))) for band in _FIXED]
    for profile_id, policy in policies.items():
        ranges = band_ranges(policy.prune_threshold, policy.summarize_threshold)
        whens += [
            When(Q(profile_id=profile_id) & ranges[band], then=Value(label(band)))
            for band in _DRAWN
        ]
    ranges = band_ranges(fallback.prune_threshold, fallback.summarize_threshold)
    whens += [When(ranges[band], then=Value(label(band))) for band in _FALLBACK]
    return Case(*whens, default=Value(label("ok")), output_field=output_field)
