"""The overview's rows and links, drawn in Python (console.overview_rows), are the former template's
markup byte for byte; its charts' data islands (console.script_json) are Django's `json_script`
byte for byte.

The templates below are the ones the overview used: the oracle.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from html import escape
from itertools import product
from typing import Any
from urllib.parse import urlencode

import pytest
from django.template import engines
from django.urls import reverse
from django.utils import timezone as django_timezone
from django.utils.html import json_script
from hypothesis import example, given
from hypothesis import strategies as st

from console.overview import Bucket, ProfileLine
from console.overview_rows import (
    band_link,
    bucket_rows,
    minute,
    profile_rows,
    table_body,
    top_cost_rows,
    top_pressure_rows,
)
from console.overview_views import drill_link
from console.periods import Period
from console.script_json import script_json
from console.templatetags.console_format import money, percent, tokens
from telemetry.band_sql import BANDS
from telemetry.models import AgentProfile, AgentSession
from telemetry.pressure import PressureBand

ENGINE = engines["django"]

BUCKET_ROW = ENGINE.from_string(
    '{% load console_format %}{% with when=b.start|date:"Y-m-d H:i"|default:"—" %}<tr><td>{{ when }}</td><td class="num">{{ b.calls|tokens }}</td><td class="num">{{ b.cost|money }}</td><td class="num">{{ b.saved|money }}</td><td class="num">{{ b.hit|percent:1 }}</td><td><a href="{{ link }}" class="drill">the sessions of {{ when }}</a></td></tr>{% endwith %}'  # noqa: E501 (the template as it was)
)
TOP_COST_ROW = ENGINE.from_string(
    """{% load console_format %}<tr><td><a href="{% url 'session' s.pk %}" class="mono">{{ s.external_id|truncatechars:32 }}</a></td><td>{{ s.profile.name }}</td><td class="num">{{ s.cost_usd|money }}</td><td class="small">{{ s.last_seen_at|date:"Y-m-d H:i"|default:"—" }}</td></tr>"""  # noqa: E501
)
TOP_PRESSURE_ROW = ENGINE.from_string(
    """{% load console_format %}<tr><td><a href="{% url 'session' s.pk %}" class="mono">{{ s.external_id|truncatechars:32 }}</a></td><td>{{ s.profile.name }}</td><td>{% band_badge band s.pressure None 0 %}</td><td class="small">{{ s.last_seen_at|date:"Y-m-d H:i"|default:"—" }}</td></tr>"""  # noqa: E501
)
PROFILE_ROW = ENGINE.from_string(
    """{% load console_format %}<tr><td><a href="?{% period_query period profile=line.name %}">{{ line.name }}</a></td><td class="num">{{ line.calls|tokens }}</td><td class="num">{{ line.cost|money }}{% unpriced_note line.unpriced %}</td><td class="num">{{ line.saved|money }}</td><td class="num">{{ line.hit|percent:1 }}</td>
      {% for band, n in line.bands.items %}<td class="num">{% if n %}<a href="{% url 'sessions' %}?{% if period.preset %}band={{ band }}&amp;seen={{ period.preset }}&amp;profile={{ line.name|urlencode }}{% else %}{% period_query period band=band profile=line.name %}{% endif %}">{{ n }}</a>{% else %}0{% endif %}</td>{% endfor %}
      <td><a href="{% url 'sessions' %}?{% if period.preset %}seen={{ period.preset }}&amp;profile={{ line.name|urlencode }}{% else %}{% period_query period profile=line.name %}{% endif %}">its sessions</a></td></tr>"""  # noqa: E501
)
# the bands part's link, and the same attribute written with `band_link` in the place of it
BAND_HREF = ENGINE.from_string(
    """{% load console_format %}<a href="{% url 'sessions' %}?{% if period.preset %}band={{ band }}&amp;seen={{ period.preset }}{% if profile %}&amp;profile={{ profile|urlencode }}{% endif %}{% else %}{% period_query period band=band profile=profile %}{% endif %}">"""  # noqa: E501
)
LINK_HREF = ENGINE.from_string('<a href="{{ link }}">')

ZONES = ["UTC", "America/St_Johns", "Asia/Kolkata"]
NAMES = ["fleet", '<b>"odd" & co</b>', "a b/c?d=e&f", "é\u0301 ünïcode", "x" * 80, "it's"]
NOW = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # a DST change in Europe that night


def _periods() -> list[Period]:
    return [
        Period(NOW - timedelta(days=30), NOW, "UTC", "30d"),
        Period(NOW - timedelta(hours=24), NOW, "Europe/Berlin", "24h", compare=True),
        # whole local days across the DST change: dates as `from` and `to`
        Period(
            datetime(2026, 3, 26, 23, 0, tzinfo=UTC),
            datetime(2026, 3, 29, 22, 0, tzinfo=UTC),
            "Europe/Berlin",
        ),
        Period(datetime(2026, 3, 1, 10, 15, tzinfo=UTC), NOW, "Asia/Kolkata", to_now=True),
        Period(
            datetime(2026, 3, 1, 10, 15, tzinfo=UTC),
            datetime(2026, 3, 2, 11, 45, tzinfo=UTC),
            "America/St_Johns",
            compare=True,
        ),
    ]


def _buckets() -> list[Bucket]:
    starts = [
        datetime(2026, 3, 29, 0, 0, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(987, 6, 7, 8, 9, 10, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ]
    costs = [Decimal(0), Decimal("0.0123456"), Decimal("9.99995"), Decimal("12345.678")]
    buckets = []
    for i, (start, cost) in enumerate(product(starts, costs)):
        bucket = Bucket(start=start, end=start + timedelta(hours=1))
        bucket.costs = dict.fromkeys(bucket.costs, cost)
        bucket.saved = [Decimal(0), Decimal("-3"), cost * 7][i % 3]
        bucket.calls = [0, 1, 1_234_567][i % 3]
        bucket.read, bucket.denominator, bucket.reported = [(0, 0, 0), (5, 10, 1), (1, 3, 2)][i % 3]
        buckets.append(bucket)
    return buckets


def test_a_bucket_row_is_the_former_template_byte_for_byte() -> None:
    buckets = _buckets()
    assert {b.hit for b in buckets} >= {None, 0.5}
    links = [f"/sessions/?from=2026-03-{i:02d}&to=x&tz=America%2FSt_Johns" for i in range(99)]
    for zone in ZONES:
        with django_timezone.override(zone):
            rows = bucket_rows(buckets, links[: len(buckets)])
            for bucket, link, row in zip(buckets, links, rows, strict=False):
                assert str(row) == BUCKET_ROW.render({"b": bucket, "link": link})


def _sessions() -> list[AgentSession]:
    ids = ["ticket-42", "x" * 33, "y" * 32, "e\u0301" * 40, "<script>alert(1)</script>", ""]
    seen = [None, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), datetime(987, 6, 7, 8, 9, tzinfo=UTC)]
    costs = [None, Decimal("0.0123456"), Decimal("12345.678"), Decimal("-3")]
    profiles = [AgentProfile(pk=1, name="fleet"), AgentProfile(pk=2, name=NAMES[1])]
    return [
        AgentSession(
            pk=i + 1,
            profile=profiles[i % 2],
            external_id=external_id,
            pressure=[None, 0.1234, 0.6, 0.95, 1.2][i % 5],
            last_seen_at=at,
            cost_usd=cost,
        )
        for i, (external_id, at, cost) in enumerate(product(ids, seen, costs))
    ]


@pytest.mark.parametrize("zone", ZONES)
def test_the_top_sessions_rows_are_the_former_template_byte_for_byte(zone: str) -> None:
    sessions = _sessions()
    bands: list[PressureBand] = ["unknown", "ok", "prune", "compact", "over"]
    pairs = [(s, bands[i % len(bands)]) for i, s in enumerate(sessions)]
    with django_timezone.override(zone):
        for session, row in zip(sessions, top_cost_rows(sessions), strict=True):
            assert str(row) == TOP_COST_ROW.render({"s": session})
        for (session, band), row in zip(pairs, top_pressure_rows(pairs), strict=True):
            assert str(row) == TOP_PRESSURE_ROW.render({"s": session, "band": band})


def test_a_profile_row_is_the_former_template_byte_for_byte() -> None:
    url = reverse("sessions")
    lines = [
        ProfileLine(
            name=name,
            calls=[0, 1, 12_345][i % 3],
            cost=[Decimal(0), Decimal("0.00005"), Decimal("123.456")][i % 3],
            saved=[Decimal("-1"), Decimal(0), Decimal("9.99995")][i % 3],
            hit=[None, 0.0, 0.87654][i % 3],
            bands={band: [0, 1, 7][(i + k) % 3] for k, band in enumerate(BANDS)},
            unpriced=[0, 1, 3][i % 3],
        )
        for i, name in enumerate(NAMES)
    ]
    for period in _periods():
        rows = profile_rows(lines, period, url)
        for line, row in zip(lines, rows, strict=True):
            assert str(row) == PROFILE_ROW.render({"line": line, "period": period})


def test_a_band_link_is_the_former_template_byte_for_byte() -> None:
    url = reverse("sessions")
    for period, band, profile in product(_periods(), BANDS, ["", *NAMES]):
        expected = BAND_HREF.render({"period": period, "band": band, "profile": profile})
        link = band_link(period, band, profile, url)
        assert LINK_HREF.render({"link": link}) == expected


# --- the charts' data islands: Django's json_script, byte for byte -----------------------------

_TEXT = st.text(st.characters(codec="utf-8") | st.sampled_from("<>&'\"/\\\u2028"), max_size=30)
_JSON: Any = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@given(value=_JSON, element_id=_TEXT.filter(bool))
@example(value={"hovertemplate": "$%{y:.4f}<extra>saved</extra>"}, element_id="fig-spend")
@example(value="</script><script>alert(1)</script>", element_id='"><b>&')
@example(value=["a & b", "x > y", "\udc80"], element_id="drill-hit")
def test_a_data_island_is_djangos_json_script_byte_for_byte(value: Any, element_id: str) -> None:
    assert script_json(value, element_id) == str(json_script(value, element_id))


def test_a_data_island_refuses_what_django_would_have_written_differently() -> None:
    with pytest.raises(TypeError):
        script_json({"cost": Decimal("1.5")}, "fig")


def test_a_drill_link_is_the_former_one_byte_for_byte() -> None:
    """The list of a bucket's sessions: its bounds' query (written once per bucket) and the
    profile, as one `urlencode` of both wrote it."""
    url = reverse("sessions")
    days = [datetime(2026, 3, 28, 23, 0, tzinfo=UTC), datetime(2026, 3, 29, 22, 0, tzinfo=UTC)]
    hours = [datetime(2026, 3, 29, 0, 30, tzinfo=UTC), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]
    for period, (start, end), profile in product(_periods(), [days, hours], ["", *NAMES]):
        params = Period(start, end, period.zone).query() | ({"profile": profile} if profile else {})
        expected = f"{url}?{urlencode(params)}"
        assert drill_link(period, start, end, profile, url) == expected
        assert drill_link(period, start, end, profile) == expected


@given(
    count=st.none() | st.integers(),
    dollars=st.none() | st.decimals(min_value=-(10**12), max_value=10**12, places=8),
    share=st.none() | st.floats(),
    at=st.none() | st.datetimes(timezones=st.just(UTC)),
)
@example(count=-1234567, dollars=Decimal("-0.00005"), share=float("nan"), at=None)
def test_a_rows_figures_have_nothing_to_escape(
    count: int | None, dollars: Decimal | None, share: float | None, at: datetime | None
) -> None:
    """What the rows write unescaped: a count, dollars, a percentage and a time."""
    for text in (tokens(count), money(dollars), percent(share, 1), minute(at, UTC)):
        assert escape(text) == text


def test_a_table_body_is_the_template_loop_byte_for_byte() -> None:
    loop = ENGINE.from_string("{% for row in rows %}\n      {{ row }}\n      {% endfor %}")
    buckets = _buckets()
    for count in (0, 1, len(buckets)):
        rows = bucket_rows(buckets[:count], [f"/s/?b={i}&x" for i in range(count)])
        assert table_body(rows, " " * 6) == loop.render({"rows": rows})
