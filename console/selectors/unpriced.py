"""Calls the console could not price: how many a spend figure leaves out, and of which models.

A call whose model the catalogue has no price for is stored with an unknown cost (never 0,
`telemetry.pricing`); each figure that sums cost counts those calls beside it (`unpriced_calls`
on a turn, a session and an hour rollup). These reads take the counts from the hour rollups,
as the overview's spend does, so they cost one query whatever the number of calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, QuerySet, Sum

from telemetry.catalogue import load_catalogue
from telemetry.models import AgentProfile, CatalogueModel, HourlyUsage
from telemetry.pricing import find_price
from telemetry.usage import model_vendor


@dataclass(frozen=True)
class UnpricedModel:
    model: str
    provider: str | None  # the vendor its name says ("anthropic", "openai"), None when unknown
    calls: int
    last_seen: datetime  # the start of the last hour it was called unpriced in (UTC)
    priced_now: bool  # the catalogue has a price for it now (its earlier calls stay unpriced)

    @property
    def provider_label(self) -> str:
        """The vendor as the catalogue names it ("OpenAI"), "unknown" when its name says none."""
        return _PROVIDER_LABELS.get(self.provider or "", "unknown")


_PROVIDER_LABELS: dict[str, str] = {
    str(value): str(label)
    for value, label in CatalogueModel._meta.get_field("provider").flatchoices
}


def _rollups(since: datetime | None, profile: AgentProfile | None) -> QuerySet[HourlyUsage]:
    rows = HourlyUsage.objects.filter(unpriced_calls__gt=0)
    if since is not None:
        rows = rows.filter(hour__gte=since.replace(minute=0, second=0, microsecond=0))
    return rows if profile is None else rows.filter(profile=profile)


def unpriced_calls(*, since: datetime | None = None, profile: AgentProfile | None = None) -> int:
    """Calls since `since` (by hour; None: ever), of `profile` (None: every profile), that
    could not be priced."""
    found = _rollups(since, profile).aggregate(n=Sum("unpriced_calls"))["n"]
    return int(found or 0)


def unpriced_models(*, since: datetime | None = None) -> list[UnpricedModel]:
    """Each model with unpriced calls, most calls first: the catalogue's missing rows."""
    catalogue = load_catalogue()
    rows = (
        _rollups(since, None)
        .values("model")
        .annotate(n=Sum("unpriced_calls"), last=Max("hour"))
        .order_by("-n", "model")
    )
    return [
        UnpricedModel(
            model=row["model"],
            provider=model_vendor(row["model"]),
            calls=int(row["n"]),
            last_seen=row["last"],
            priced_now=find_price(row["model"], catalogue) is not None,
        )
        for row in rows
    ]
