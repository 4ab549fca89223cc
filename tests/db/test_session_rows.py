"""The sessions list's rows and pressure badges, drawn in Python, are the former templates'
markup byte for byte (console.session_rows, console_format.band_badge), the relief flag
written in the template beside the band as the oracle of its own markup.

The templates below are the ones the list and the former `_band.html` include used: the oracle.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from itertools import product

import pytest
from django.template import engines
from django.utils import timezone as django_timezone

from compaction.relief_state import ReliefState, SessionRelief
from console.presenters.sessions import SessionRow, relief_flag, round_flag
from console.session_rows import session_row
from console.templatetags.console_format import band_badge
from telemetry.models import AgentProfile, AgentSession
from telemetry.policy_rules import DEFAULT_POLICY
from telemetry.session_state import session_band

BAND_TEMPLATE = (
    '{% load console_format %}<span class="badge band-{{ band }}{% if big %} big{% endif %}"'
    '{% if policy %} title="{{ band }}: prune at {{ policy.prune_threshold|percent }}, '
    'summarize at {{ policy.summarize_threshold|percent }}"{% endif %}>{% if band == "unknown" %}'
    'unknown{% else %}{{ pressure|percent:digits|default:"" }} <span class="band-name">'
    "{{ band }}</span>{% endif %}</span>"
)

ROW_TEMPLATE = """{% load console_format %}<tr>
        <td class="name wraps"><a href="{% url 'session' row.session.pk %}" class="mono">{{ row.session.external_id|truncatechars:40 }}</a></td>
        <td>{% include band_template with band=row.band pressure=row.session.pressure policy=row.policy digits=0 %}{% if flag %} {% if row.relief.failed_run is not None %}<a href="{% url 'session' row.session.pk %}#run-{{ row.relief.failed_run }}" class="{{ flag.0 }}" title="{{ flag.2 }}">{{ flag.1 }}</a>{% else %}<span class="{{ flag.0 }}" title="{{ flag.2 }}">{{ flag.1 }}</span>{% endif %}{% endif %}
</td>
        <td class="wraps">{{ row.session.profile.name }}</td>
        <td class="mono small wraps">{{ row.session.model|default:"—" }}</td>
        <td class="num">{{ row.session.last_turn_cache_hit_ratio|percent }}</td>
        <td class="num">{{ row.hit_ratio|percent }}</td>
        <td class="num">{{ row.session.cost_usd|money }}{% unpriced_note row.session.unpriced_calls %}</td>
        <td class="num">{{ row.session.turns_count }}</td>
        <td class="num">{{ row.session.last_turn_rounds }}{% if row.round_flag == "hard" %} <span class="flag hard" title="a turn reached the hard cap of {{ row.policy.round_hard_cap }} rounds">hard cap</span>{% elif row.round_flag == "soft" %} <span class="flag soft" title="a turn passed the soft limit of {{ row.policy.round_soft_limit }} rounds">soft limit</span>{% endif %}</td>
        <td class="small"><time datetime="{{ row.session.last_seen_at|date:'c' }}">{{ row.session.last_seen_at|date:"Y-m-d H:i:s"|default:"—" }}</time></td>
      </tr>"""  # noqa: E501 (the template as it was)

ENGINE = engines["django"]
BAND = ENGINE.from_string(BAND_TEMPLATE)
ROW = ENGINE.from_string(ROW_TEMPLATE)


def _rows() -> list[SessionRow]:
    profiles = [AgentProfile(pk=1, name="fleet"), AgentProfile(pk=2, name='<b>"odd" & co</b>')]
    policy = replace(DEFAULT_POLICY, round_soft_limit=3, round_hard_cap=6)
    ids = ["ticket-42", "x" * 41, "e\u0301" * 45, "<script>alert(1)</script>", ""]
    pressures = [None, 0.1234, 0.6, 0.95, 1.2]
    seen = [
        None,
        datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC),
        datetime(987, 6, 7, 8, 9, 10, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ]
    rows = []
    for i, (external_id, pressure, at, rounds) in enumerate(
        product(ids, pressures, seen, [0, 4, 9])
    ):
        session = AgentSession(
            pk=i + 1,
            profile=profiles[i % 2],
            external_id=external_id,
            model=["", "claude-sonnet-4-5", "<i>m</i>"][i % 3],
            pressure=pressure,
            last_seen_at=at,
            turns_count=i * 1_001,
            last_turn_rounds=rounds,
            max_turn_rounds=rounds,
            last_turn_cache_hit_ratio=[None, 0.5, 0.999][i % 3],
            cache_read_tokens=i * 10,
            cache_denominator_tokens=[0, i * 20, 7][i % 3],
            cache_reported_calls=i % 2,
            cost_usd=[None, Decimal("0.0123456"), Decimal("12345.678"), Decimal("-3")][i % 4],
            unpriced_calls=[0, 1, 12_345][i % 3],
        )
        rows.append(
            SessionRow(
                session=session,
                policy=policy,
                band=session_band(session, policy),
                round_flag=round_flag(session.max_turn_rounds, policy),
                hit_ratio=session.cache_hit_ratio,
                relief=RELIEFS[i % len(RELIEFS)],
            )
        )
    return rows


RELIEFS = [
    SessionRelief(ReliefState.NONE),
    SessionRelief(ReliefState.PENDING),
    SessionRelief(ReliefState.PENDING, overdue=True),
    SessionRelief(ReliefState.FAILING, failures=1),
    SessionRelief(ReliefState.FAILING, failures=2, failed_run=7),
    SessionRelief(ReliefState.GIVEN_UP, failures=5, failed_run=12),
]


@pytest.mark.parametrize("zone", ["UTC", "America/St_Johns"])
def test_a_session_row_is_the_former_template_byte_for_byte(zone: str) -> None:
    rows = _rows()
    assert {row.band for row in rows} == {"unknown", "ok", "prune", "compact", "over"}
    assert {row.round_flag for row in rows} == {None, "soft", "hard"}
    assert {row.relief for row in rows} == set(RELIEFS)
    with django_timezone.override(zone):
        for row in rows:
            flag = relief_flag(row.relief)
            expected = ROW.render({"row": row, "band_template": BAND, "flag": flag})
            assert str(session_row(row)) == expected


def test_a_band_badge_is_the_former_include_byte_for_byte() -> None:
    policy = replace(DEFAULT_POLICY, prune_threshold=0.5, summarize_threshold=0.755)
    for band, pressure, with_policy, digits, big in product(
        ["unknown", "ok", "prune", "compact", "over"],
        [None, 0.0, 0.4567, 1.5],
        [True, False],
        [0, 1],
        [True, False],
    ):
        context: dict[str, object] = {"band": band, "pressure": pressure, "digits": digits}
        if with_policy:
            context["policy"] = policy
        if big:
            context["big"] = True
        expected = BAND.render(context)
        given = policy if with_policy else None
        assert str(band_badge(band, pressure, given, digits, big)) == expected
