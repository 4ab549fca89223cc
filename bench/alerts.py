"""PAL: batched ingest with 50 alert rules active against the same ingest with none.

Both sides are P1's load (`Bench.batched`) on the same gunicorn and Celery worker, runs
alternating (off, on, off, on …) so a shared machine's drift hits both alike. With the rules
switched on, every ingest commit nudges the per-session evaluation (`alerts.nudge`): the web
process checks that rules exist and hands the session ids to its publisher thread; the worker
evaluates them. Between switches the bench waits out the web processes' remembered rules check
(`alerts.nudge.RULES_SECONDS`). Bar: ingest with rules ≥ 0.9 × ingest without.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import TYPE_CHECKING

from bench.load import median

if TYPE_CHECKING:
    from bench.run import Bench

RULES = 50


def _rules() -> None:
    from alerts.firing import METRICS
    from alerts.models import AlertRule

    AlertRule.objects.filter(name__startswith="pal-").delete()
    names = list(METRICS)
    AlertRule.objects.bulk_create(
        AlertRule(
            name=f"pal-{i}",
            metric=names[i % len(names)],
            # a spread of thresholds: a few fire (and write their alert), most do not
            threshold=Decimal(i % 5),
            window_minutes=60,
            cooldown_minutes=30,
            channel="none",
            enabled=False,
        )
        for i in range(RULES)
    )


def _switch(on: bool) -> None:
    from alerts.models import AlertRule
    from alerts.nudge import RULES_SECONDS

    AlertRule.objects.filter(name__startswith="pal-").update(enabled=on)
    time.sleep(RULES_SECONDS + 1)


def measure_pal(bench: Bench) -> None:
    s = bench.sizes
    sent = s.p1_clients * s.p1_posts * s.p1_batch
    _rules()
    off: list[float] = []
    on: list[float] = []

    def one(run: int) -> None:
        for active, rates in ((False, off), (True, on)):
            _switch(active)
            label = f"pal-r{run}-{'on' if active else 'off'}"
            result = bench.batched(label)
            assert not result.errors, result.errors
            if run >= 0:
                rates.append(sent / result.wall_s)

    bench.runs(one)
    _switch(False)
    from alerts.models import Alert

    fired = Alert.objects.filter(rule__name__startswith="pal-").count()
    without, with_rules = median(off), median(on)
    bench.baseline("B_norules", rows_per_s=without, runs=off)
    bench.measurement("PAL", rows_per_s=with_rules, runs=on, rules=RULES, alerts_fired=fired)
    from bench.run import Bar

    bench.bars.append(
        Bar(
            "PAL",
            f"batched ingest with {RULES} alert rules active ({fired} alerts fired)",
            f"{with_rules:,.0f} rows/s",
            f"B_norules {without:,.0f} rows/s",
            with_rules / without,
            "≥ 0.9 ×",
            with_rules / without >= 0.9,
        )
    )
