"""Formatting filters and query-string tags of the console templates."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from functools import lru_cache
from html import escape as escape_text
from typing import Any
from urllib.parse import urlencode

from django import template
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from console.periods import COMMON_ZONES, PERIOD_PARAMETERS, PRESETS, Period
from console.plotly_bundle import bundle
from console.script_json import script_json as script_json_text

register = template.Library()


@register.filter
def tokens(value: int | None) -> str:
    """12345 → "12,345"; None → "—"."""
    return "—" if value is None else f"{value:,}"


@register.filter
def percent(value: float | None, digits: int = 0) -> str:
    """0.625 → "63 %"; None → "unknown"."""
    if value is None:
        return "unknown"
    return f"{value * 100:.{int(digits)}f} %"


@register.simple_tag
def band_badge(
    band: str, pressure: float | None, policy: Any = None, digits: int = 0, big: bool = False
) -> SafeString:
    """A pressure badge: the band in words beside the figure, never colour alone; with the
    profile's thresholds in its title when `policy` is given. Python, not a template include:
    the sessions list draws 25 a page (console.session_rows)."""
    title = (
        f' title="{escape_text(band)}: prune at {escape_text(percent(policy.prune_threshold))}, '
        f'summarize at {escape_text(percent(policy.summarize_threshold))}"'
        if policy
        else ""
    )
    figure = (
        "unknown"
        if band == "unknown"
        else f'{escape_text(percent(pressure, digits))} <span class="band-name">{escape_text(band)}</span>'
    )
    return mark_safe(  # noqa: S308 (every value in it was escaped)
        f'<span class="badge band-{escape_text(band)}{" big" if big else ""}"{title}>{figure}</span>'
    )


@register.filter
def money(value: Decimal | float | None) -> str:
    """Dollars with four decimals below $10 (a turn costs cents), two above; None → "unpriced"."""
    if value is None:
        return "unpriced"
    amount = Decimal(value) if not isinstance(value, Decimal) else value
    sign = "−" if amount < 0 else ""
    amount = abs(amount)
    places = "0.01" if amount >= 10 else "0.0001"
    return f"{sign}${amount.quantize(Decimal(places)):,}"


@register.simple_tag
def unpriced_note(count: int | None) -> SafeString:
    """ " · 12 calls unpriced" beside a spend figure that leaves out calls the catalogue has no
    price for, linked to the catalogue's list of those models (where each is added); nothing
    when every call was priced. The one form of the note: pages call this tag, the sessions
    list's rows (`console.session_rows`) this function."""
    if not count:
        return mark_safe("")
    return mark_safe(  # noqa: S308 (a URL and an integer)
        f' <a class="unpriced-note" href="{reverse("catalogue")}#unpriced" '
        'title="calls of models the catalogue has no price for: this figure leaves them out">'
        f"· {count:,} call{'' if count == 1 else 's'} unpriced</a>"
    )


@register.filter
def gap(value: timedelta | None) -> str:
    """A gap between requests: "42 s", "7.5 min", "2.1 h"; None → "—"."""
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@register.simple_tag(takes_context=True)
def query(context: dict[str, Any], **changes: Any) -> str:
    """The current query string with `changes` applied (None removes a key), e.g.
    `?{% query page=2 %}`. A change of filter or sort drops the page number."""
    request: HttpRequest = context["request"]
    params = request.GET.copy()
    if "page" not in changes:
        params.pop("page", None)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    return params.urlencode()


@register.simple_tag(takes_context=True)
def sort_query(context: dict[str, Any], key: str) -> str:
    """The query string sorting by `key`: descending first, ascending when already descending."""
    current = context["request"].GET.get("sort") or "-last_seen"
    target = key if current == f"-{key}" else f"-{key}"
    return query(context, sort=target)


@register.simple_tag(takes_context=True)
def sort_mark(context: dict[str, Any], key: str) -> str:
    current = context["request"].GET.get("sort") or "-last_seen"
    if current == f"-{key}":
        return "▼"
    if current == key:
        return "▲"
    return ""


@register.filter
def price(value: Decimal | None) -> str:
    """A $/MTok rate without trailing zeros: Decimal("0.300000") → "0.3"; None → "—"."""
    if value is None:
        return "—"
    return f"{value.normalize():f}"


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    """`mapping[key]` in a template (None when missing)."""
    return mapping.get(key)


@register.filter
def mentions(text: str, query: str) -> bool:
    """Whether `text` holds any word of `query` (case-insensitive): a block to open."""
    words = [w for w in str(query or "").lower().split() if len(w) > 1]
    lowered = str(text).lower()
    return any(w.strip("*") in lowered for w in words)


@register.filter
def highlight(text: str, query: str) -> str:
    """`text` escaped, every word of `query` in it wrapped in <mark> (case-insensitive)."""
    from django.utils.html import escape
    from django.utils.safestring import mark_safe

    words = sorted(
        {w.strip("*") for w in str(query or "").split() if len(w.strip("*")) > 1}, key=len
    )[::-1]
    if not words:
        return escape(text)
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    out: list[str] = []
    last = 0
    for found in pattern.finditer(str(text)):
        out.append(escape(str(text)[last : found.start()]))
        out.append(f"<mark>{escape(found.group(0))}</mark>")
        last = found.end()
    out.append(escape(str(text)[last:]))
    return mark_safe("".join(out))  # noqa: S308 (every piece of text was escaped)


@register.filter
def script_json(value: Any, element_id: str) -> SafeString:
    """`{{ figure|script_json:"fig-spend" }}`: Django's `json_script` at a fraction of its CPU
    (`console.script_json`), for plain data only (a Decimal or a datetime raises)."""
    return mark_safe(script_json_text(value, element_id))  # noqa: S308 (escaped there)


@register.simple_tag
def plotly_script() -> SafeString:
    """The one script tag of the vendored plotly.js bundle (deferred: it runs before console.js,
    which draws the figures, and neither blocks the page's parsing)."""
    return format_html('<script src="{}" defer></script>', static(bundle().static_name))


# --- the period (console.periods) ---------------------------------------------------------------


@register.simple_tag
def period_query(period: Period, **extra: Any) -> str:
    """The query string of `period` with `extra` (None or "" left out): a link that keeps the
    period, e.g. `{% url 'sessions' %}?{% period_query period profile=name %}`."""
    params = period.query() | {k: str(v) for k, v in extra.items() if v is not None and v != ""}
    return urlencode(params)


@register.simple_tag(takes_context=True)
def period_picker(context: dict[str, Any], live: int = 0, any_time: bool = False) -> SafeString:
    """The period picker: the presets as links, a custom range, the time zone and the previous
    period, keeping the page's other parameters (`live`: the overview's refresh interval in
    seconds, with its switch; `any_time`: a page whose default is no period at all, such as
    the alerts' history). Rendered once for each set of values it shows (`picker_values`)."""
    return _picker_html(picker_values(context["request"], context["period"], live, any_time))


def picker_values(
    request: HttpRequest, period: Period, live: int = 0, any_time: bool = False
) -> tuple[tuple[str, Any], ...]:
    """Every value the picker's template reads, and nothing else, as hashable pairs: the page
    of a rolling period shows the same picker on every load (its dates change once a day), so
    its HTML is rendered once for these values and then looked up (`_picker_html`)."""
    bounded = any(request.GET.get(name) for name in ("range", "from", "to"))
    kept = tuple(
        (name, value)
        for name, values in request.GET.lists()
        if name not in PERIOD_PARAMETERS and name not in ("page", "cursor")
        for value in values
    )
    zones = COMMON_ZONES if period.zone in COMMON_ZONES else (period.zone, *COMMON_ZONES)
    first, last = period.local_bounds_text()
    return (
        ("zone", period.zone),
        ("preset", period.preset),
        ("compare", period.compare),
        ("describe", period.describe()),
        ("period_params", tuple(period.query().items())),
        ("kept", kept),
        ("zones", zones),
        ("first", first[:10]),
        ("last", last[:10]),
        ("live", live),
        ("any_time", any_time),
        ("chosen", bounded or not any_time),
        (
            "any_time_link",
            urlencode(kept + ((("tz", period.zone),) if request.GET.get("tz") else ())),
        ),
        (
            "preset_links",
            tuple(
                (key, urlencode([*kept, *(period_with(period, key).items())])) for key in PRESETS
            ),
        ),
    )


@lru_cache(maxsize=256)
def _picker_html(values: tuple[tuple[str, Any], ...]) -> SafeString:
    """The picker for `values` (`picker_values`): the template sees these values alone, so the
    same values give the same HTML."""
    return mark_safe(render_to_string("console/_period_picker.html", dict(values)))  # noqa: S308 (a template's autoescaped output)


def period_with(period: Period, preset: str) -> dict[str, str]:
    """The query of `preset` in `period`'s zone, keeping the comparison."""
    params = {"range": preset, "tz": period.zone}
    if period.compare:
        params["compare"] = "previous"
    return params


@register.filter
def change_percent(value: float | None) -> str:
    """A relative change in words: 0.25 → "+25 %", -0.5 → "−50 %", None → "no base"."""
    if value is None:
        return "no base to compare"
    sign = "+" if value > 0 else ("−" if value < 0 else "±")
    return f"{sign}{abs(value) * 100:.0f} %"
