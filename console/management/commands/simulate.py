"""`python manage.py simulate [--base-url URL] [--seed 7] [--sessions N] [--quiet]`.

Seeds the console's demo: a small fleet of realistic agent sessions (`telemetry.simulation`)
reported through the real HTTP API, as agents would, with keys this command creates for the
`default`, `fleet` and `desktop` profiles. Every answer is checked against what the scenario
expects (status, per-item outcome, the round nudge and stop, the session's context and
projection); anything else stops the run with a CommandError naming the request and the answer.
`make run` calls it once, when the database holds no session.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from telemetry.keys import create_agent_key
from telemetry.simulation import (
    PROFILES,
    ROSTER,
    CallRecord,
    Limits,
    Profile,
    Scenario,
    SessionScript,
    Signal,
    Submission,
    build_scenario,
    expected_signals,
    plan_submissions,
)

TELEMETRY = "api/v1/telemetry"
POLICY = "api/v1/policy"
TIMEOUT = 30
RETRIES_ON_429 = 5


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect (an HTTPS upgrade) is an answer to report, never a POST to re-send as GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Api:
    """A minimal JSON client of the console's API over urllib."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
        if _is_loopback(urllib.parse.urlsplit(self.base_url).hostname or ""):
            handlers.append(urllib.request.ProxyHandler({}))  # never send localhost to a proxy
        self.opener = urllib.request.build_opener(*handlers)
        self.requests = 0

    def call(self, method: str, path: str, key: str, body: object | None = None) -> tuple[int, Any]:
        url = urllib.parse.urljoin(self.base_url, path)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for _ in range(RETRIES_ON_429 + 1):
            request = urllib.request.Request(url, data=data, headers=headers, method=method)
            self.requests += 1
            try:
                with self.opener.open(request, timeout=TIMEOUT) as response:
                    return response.status, _decode(response.read(), method, url)
            except urllib.error.HTTPError as exc:
                payload = exc.read()
                if exc.code == 429:
                    time.sleep(min(float(exc.headers.get("Retry-After") or 1), 60.0))
                    continue
                if 300 <= exc.code < 400:
                    raise CommandError(
                        f"{method} {url} answered {exc.code}, a redirect to "
                        f"{exc.headers.get('Location')!r}: use that URL as --base-url (or turn "
                        "off DJANGO_SECURE_SSL_REDIRECT for a plain-HTTP development server)"
                    ) from None
                return exc.code, _decode(payload, method, url, status=exc.code)
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise CommandError(f"cannot reach {url}: {reason}") from None
        raise CommandError(f"{method} {url}: still rate-limited after {RETRIES_ON_429} retries")


def _decode(raw: bytes, method: str, url: str, status: int = 200) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        raise CommandError(
            f"{method} {url} answered {status} with a body that is not JSON: {raw[:300]!r}"
        ) from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Tracker:
    """What the server should hold after each submission, to compare its answers with."""

    scenario: Scenario
    limits: dict[Profile, Limits]
    stored: set[tuple[str, int, int]] = field(default_factory=set)
    latest: dict[str, CallRecord] = field(default_factory=dict)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    nudged: dict[str, set[int]] = field(default_factory=dict)
    stopped: dict[str, set[int]] = field(default_factory=dict)
    replay: tuple[int, int] | None = None  # (records, duplicates)

    def __post_init__(self) -> None:
        self.scripts = {s.session_id: s for s in self.scenario.sessions}

    def check(self, sub: Submission, status: int, body: Any, signals: list[Signal]) -> None:
        what = _describe(sub)
        expected_status = 200 if sub.batch or sub.replay else 201
        if status != expected_status or not isinstance(body, dict):
            raise CommandError(f"{what}: expected HTTP {expected_status}, got {status}: {body}")
        n = len(sub.records)
        new = {"created": 0 if sub.replay else n, "duplicates": n if sub.replay else 0}
        counts = {k: body.get(k) for k in ("created", "duplicates", "conflicts", "invalid")}
        if counts != {**new, "conflicts": 0, "invalid": 0}:
            raise CommandError(f"{what}: expected {new}, got {counts}: {_first_problem(body)}")
        items = body.get("items")
        if not isinstance(items, list) or len(items) != n:
            raise CommandError(f"{what}: expected {n} items, got {items!r}")
        for index, (record, item, signal) in enumerate(
            zip(sub.records, items, signals, strict=True)
        ):
            self._check_item(what, index, record, item, signal, replay=sub.replay)
        if not sub.replay:
            for record in sub.records:
                self.stored.add((record.session_id, record.turn, record.call))
                self.latest[record.session_id] = record
        sessions = body.get("sessions")
        if not isinstance(sessions, list):
            raise CommandError(f"{what}: no session figures in {body}")
        answered = {s.get("session_id"): s for s in sessions if isinstance(s, dict)}
        for session_id in {r.session_id for r in sub.records}:
            figures = answered.get(session_id)
            if figures is None:
                raise CommandError(f"{what}: no figures for session {session_id!r}")
            self._check_figures(what, session_id, figures, replay=sub.replay)
            self.figures[session_id] = figures
        if sub.replay:
            self.replay = (n, counts["duplicates"] or 0)

    def _check_item(
        self,
        what: str,
        index: int,
        record: CallRecord,
        item: Any,
        signal: Signal,
        *,
        replay: bool,
    ) -> None:
        expected = {
            "index": index,
            "status": "duplicate" if replay else "created",
            "session_id": record.session_id,
            "turn": record.turn,
            "call": record.call,
            "stop": signal == "stop",
        }
        got = {k: item.get(k) for k in expected} if isinstance(item, dict) else item
        if got != expected:
            raise CommandError(f"{what}: item {index}: expected {expected}, got {item}")
        if (item.get("nudge") is not None) != (signal != "none"):
            raise CommandError(
                f"{what}: item {index} (turn {record.turn} call {record.call}): expected "
                f"{'a' if signal != 'none' else 'no'} nudge for round signal {signal!r}, "
                f"got {item.get('nudge')!r}"
            )
        if signal != "none":
            self.nudged.setdefault(record.session_id, set()).add(record.turn)
        if signal == "stop":
            self.stopped.setdefault(record.session_id, set()).add(record.turn)

    def _check_figures(
        self, what: str, session_id: str, figures: dict[str, Any], *, replay: bool
    ) -> None:
        script = self.scripts[session_id]
        latest = self.latest[session_id]
        expected: dict[str, Any] = {
            "calls": sum(1 for s, _, _ in self.stored if s == session_id),
            "current_context_tokens": latest.context_tokens,
            "projected_next_request_tokens": latest.projected_next,
        }
        if script.spec.report_window:
            expected["window_tokens"] = script.spec.window_tokens
        if not script.spec.priced:
            expected["cost_usd"] = None
            expected["unpriced_calls"] = expected["calls"]
        else:
            expected["unpriced_calls"] = 0
        if replay:
            # A replay changes nothing: the figures are the ones the last answer gave.
            expected = {k: self.figures[session_id].get(k) for k in figures}
        got = {k: figures.get(k) for k in expected}
        if got != expected:
            diff = {k: (expected[k], got[k]) for k in expected if expected[k] != got[k]}
            raise CommandError(f"{what}: session {session_id}: (expected, got) differ: {diff}")


def _describe(sub: Submission) -> str:
    first, last = sub.records[0], sub.records[-1]
    if not sub.batch:
        return f"POST /{TELEMETRY} (session {first.session_id} turn {first.turn} call {first.call})"
    sessions = len({r.session_id for r in sub.records})
    label = "replayed batch" if sub.replay else "batch"
    return (
        f"POST /{TELEMETRY} ({label} of {len(sub.records)} records, {sessions} session(s), "
        f"{first.session_id} turn {first.turn} … {last.session_id} turn {last.turn})"
    )


def _first_problem(body: dict[str, Any]) -> str:
    for item in body.get("items") or ():
        if isinstance(item, dict) and item.get("status") not in ("created", "duplicate"):
            return f"first problem: item {item.get('index')}: {item.get('detail')}"
    return f"items {str(body.get('items'))[:300]}"


class Command(BaseCommand):
    help = "Seed demo data: drive a fleet of realistic agent sessions through the telemetry API."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000/",
            help="the running console (default http://127.0.0.1:8000/)",
        )
        parser.add_argument("--seed", type=int, default=7, help="scenario seed (default 7)")
        parser.add_argument(
            "--sessions",
            type=int,
            default=len(ROSTER),
            help=f"how many sessions (default {len(ROSTER)}, the whole roster)",
        )
        parser.add_argument("--quiet", action="store_true", help="print nothing unless it fails")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["sessions"] < 1:
            raise CommandError("--sessions must be at least 1")
        started = time.monotonic()
        api = Api(options["base_url"])
        keys: dict[Profile, str] = {}
        limits: dict[Profile, Limits] = {}
        for profile in PROFILES:
            issued = create_agent_key(
                profile_name=profile, scopes=["compact"], name="simulate: demo data"
            )
            keys[profile] = issued.plaintext
            status, policy = api.call("GET", POLICY, issued.plaintext)
            if status != 200 or not isinstance(policy, dict):
                raise CommandError(
                    f"GET /{POLICY} as {profile}: expected 200, got {status}: {policy}"
                )
            try:
                limits[profile] = Limits.from_policy(policy)
            except ValueError as exc:
                raise CommandError(f"GET /{POLICY} as {profile}: {exc}") from None

        scenario = build_scenario(
            seed=options["seed"],
            now=timezone.now(),
            sessions=options["sessions"],
            limits=limits,
        )
        submissions = plan_submissions(scenario)
        tracker = _Tracker(scenario, limits)
        for sub, signals in zip(submissions, expected_signals(submissions, limits), strict=True):
            status, body = api.call("POST", TELEMETRY, keys[sub.profile], sub.body())
            tracker.check(sub, status, body, signals)
        if not options["quiet"]:
            self._summary(scenario, submissions, tracker, api, time.monotonic() - started)

    def _summary(
        self,
        scenario: Scenario,
        submissions: list[Submission],
        tracker: _Tracker,
        api: Api,
        seconds: float,
    ) -> None:
        kinds = Counter("batch" if s.batch else "single" for s in submissions)
        out = self.stdout.write
        out(
            f"Simulated {len(scenario.sessions)} sessions, {len(scenario.records)} calls in "
            f"{kinds['batch']} batches and {kinds['single']} single records "
            f"({api.requests} requests to {api.base_url}, {seconds:.1f} s)."
        )
        out(
            f"  {'session':30} {'model':44} {'profile':8} {'turns':>5} {'calls':>5} "
            f"{'context':>8} {'pressure':>8} {'band':8} {'cache hit':>9} {'cost':>9}"
        )
        for script in scenario.sessions:
            f = tracker.figures.get(script.session_id, {})
            pressure, hit, cost = f.get("pressure"), f.get("cache_hit_ratio"), f.get("cost_usd")
            out(
                f"  {script.session_id:30} {script.spec.model:44} {script.spec.profile:8} "
                f"{f.get('turns', 0):>5} {f.get('calls', 0):>5} "
                f"{f.get('current_context_tokens') or 0:>8,} "
                f"{'-' if pressure is None else f'{pressure:.0%}':>8} "
                f"{f.get('pressure_band', '?'):8} "
                f"{'unknown' if hit is None else f'{hit:.0%}':>9} "
                f"{'unknown' if cost is None else '$' + format(float(cost), '.2f'):>9}"
            )
        self._crossings(scenario, tracker, out)

    def _crossings(self, scenario: Scenario, tracker: _Tracker, out: Any) -> None:
        by_band: dict[str, list[str]] = {}
        for script in scenario.sessions:
            band = str(tracker.figures.get(script.session_id, {}).get("pressure_band"))
            by_band.setdefault(band, []).append(script.spec.slug)
        limits = tracker.limits["default"]
        out(
            f"Over prune ({limits.prune_threshold:.0%}): "
            f"{', '.join(by_band.get('prune', [])) or 'none'}; over summarize "
            f"({limits.summarize_threshold:.0%}): "
            f"{', '.join(by_band.get('compact', []) + by_band.get('over', [])) or 'none'}."
        )
        breaks = [_breaks(s) for s in scenario.sessions if s.cache_break_turns]
        out(f"Cache rewrites: {'; '.join(breaks) or 'none'}.")
        out(
            f"Round nudge: {_rounds(scenario, tracker.nudged)}; "
            f"stop: {_rounds(scenario, tracker.stopped)}."
        )
        unpriced = [
            f"{s.spec.slug} ({s.spec.model})" for s in scenario.sessions if not s.spec.priced
        ]
        out(f"Unknown price: {', '.join(unpriced) or 'none'}.")
        if tracker.replay is not None:
            records, duplicates = tracker.replay
            out(f"Replayed a {records}-record batch: {duplicates} duplicates, nothing changed.")


def _breaks(script: SessionScript) -> str:
    reasons = []
    for turn in script.turns:
        if turn.system_changed:
            reasons.append(f"turn {turn.turn} system prompt changed")
        elif turn.cache_expired:
            gap = turn.gap_before.total_seconds() / 60 if turn.gap_before else 0
            reasons.append(f"turn {turn.turn} after {gap:.0f} min idle")
    return f"{script.spec.slug} ({', '.join(reasons)})"


def _rounds(scenario: Scenario, turns: dict[str, set[int]]) -> str:
    parts = []
    for script in scenario.sessions:
        for turn in sorted(turns.get(script.session_id, ())):
            rounds = len(script.turns[turn - 1].rounds)
            parts.append(f"{script.spec.slug} turn {turn} ({rounds} rounds)")
    return ", ".join(parts) or "none"
