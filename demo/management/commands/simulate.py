"""`python manage.py simulate [--base-url URL] [--seed 7] [--sessions N] [--no-compaction] [--quiet]`.

Seeds the console's demo: a small fleet of realistic agent sessions (`demo.scenario`)
driven through the real HTTP API, as agents would, with keys this command creates for the
`default`, `fleet` and `desktop` profiles (each with the `compact` scope).

1. **Traffic.** Each session's transcript is appended turn by turn
   (`POST /api/v1/sessions/{id}/messages`: the system prompt and the first user message, then
   before each call the previous reply and its tool results), and each call is reported
   (`POST /api/v1/telemetry`) with the `surface_version` its request was built from, read from
   the append before it. Every answer is checked against what the scenario expects (status,
   per-item outcome, the round nudge and stop, the session's context and projection).
2. **Compaction** (skipped with `--no-compaction`), on the sessions the roster keeps for it:
   an overflow (the provider rejects a request near the wall; `POST .../overflow` compacts and
   the agent retries once on the new surface), a manual never-lossy `POST .../compact` (prunes
   and summarizes, archive first), and one automatic relief run in this process with the
   archive backend failing on purpose (D5's safety valve: it compacts anyway, the run records
   `archived=False` and the error, and the `compaction` logger writes one ERROR line).
   The other sessions over `prune_threshold` are left to the worker: the command enqueues their
   relief jobs by task name, as ingest does, and names them.

   The scenario's telemetry is planned in advance and cannot shrink after a compaction, so
   compaction waits until the traffic is replayed: from each session's first append the
   command holds its relief claim (`relief_requested_at`, the mark of a pending job, so ingest
   and the sweeper enqueue nothing), and releases every claim at the end. The overflow and the
   archive-outage run therefore happen the same way on every run, worker or not.

Anything unexpected stops the run with a CommandError naming the request and the answer.
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q, QuerySet
from django.utils import timezone

from compaction.archives import FailingArchive
from compaction.models import CompactionRun
from compaction.services import relieve_session
from demo.cache_demo import send_cache_demo
from demo.claude_code_demo import send_claude_code_demo
from demo.scenario import (
    PROFILES,
    ROSTER,
    Append,
    CallRecord,
    DemoRole,
    Limits,
    OverflowTurn,
    Profile,
    Scenario,
    SessionScript,
    Signal,
    Submission,
    build_scenario,
    expected_signals,
    message_chars,
    plan_submissions,
)
from telemetry.keys import create_agent_key
from telemetry.models import AgentSession
from telemetry.relief_dispatch import request_relief
from telemetry.session_state import claim_relief, release_relief

TELEMETRY = "api/v1/telemetry"
POLICY = "api/v1/policy"
SESSIONS = "api/v1/sessions"
# Figures a compaction changes between two ingest answers (the worker may run in between).
RELIEF_FIGURES = frozenset(
    {"projected_next_request_tokens", "pressure", "pressure_band", "surface_version"}
)
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
        # UTF-8 as is (as JavaScript agents send it); control characters such as NUL stay escaped.
        data = (
            None
            if body is None
            else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        )
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
            # A replay changes nothing: the figures are the ones the last answer gave, except
            # what appends and compactions (the worker's, meanwhile) have moved since.
            expected = {
                k: self.figures[session_id].get(k) for k in figures if k not in RELIEF_FIGURES
            }
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


@dataclass
class _Transcripts:
    """Appends each session's transcript as its agent would: before each call, what it needs.

    `versions` holds, per call, the surface version the append before it answered.
    """

    api: Api
    keys: dict[Profile, str]
    scenario: Scenario
    on_created: Callable[[SessionScript], None] = lambda script: None
    versions: dict[tuple[str, int, int], int] = field(default_factory=dict)
    current: dict[str, int] = field(default_factory=dict)
    appends: int = 0
    messages: int = 0
    chars: int = 0
    largest_result: int = 0
    nul_results: int = 0

    def __post_init__(self) -> None:
        self.scripts = {s.session_id: s for s in self.scenario.sessions}
        self.pending = {s.session_id: list(s.appends()) for s in self.scenario.sessions}

    def before(self, records: tuple[CallRecord, ...]) -> None:
        """Append what each of `records`' requests was built from (already done is skipped)."""
        for record in records:
            key = (record.session_id, record.turn, record.call)
            queue = self.pending[record.session_id]
            while key not in self.versions:
                if not queue or queue[0].before is None:
                    raise CommandError(f"no append precedes call {key} in the scenario")
                self.send(queue.pop(0))

    def finish(self) -> None:
        """The replies that ended each session."""
        for queue in self.pending.values():
            while queue:
                self.send(queue.pop(0))

    def send(self, append: Append) -> int:
        script = self.scripts[append.session_id]
        path = f"{SESSIONS}/{urllib.parse.quote(append.session_id, safe='')}/messages"
        status, body = self.api.call("POST", path, self.keys[append.profile], append.body())
        first = 0 if append.system is not None else append.first_seq
        expected = list(range(first, append.last_seq + 1))
        what = f"POST /{path} (seq {first}-{append.last_seq})"
        if status != 201 or not isinstance(body, dict):
            raise CommandError(f"{what}: expected HTTP 201, got {status}: {body}")
        if body.get("appended") != expected or body.get("duplicates") != []:
            raise CommandError(
                f"{what}: expected seqs {expected} appended, got {body.get('appended')} "
                f"(duplicates {body.get('duplicates')})"
            )
        version = body.get("surface_version")
        previous = self.current.get(append.session_id, 0)
        if not isinstance(version, int) or version <= previous:
            raise CommandError(f"{what}: expected a surface version above {previous}: {body}")
        if previous == 0:
            self.on_created(script)
        self.current[append.session_id] = version
        if append.before is not None:
            turn, call = append.before
            self.versions[(append.session_id, turn, call)] = version
        self.appends += 1
        self.messages += len(append.messages) + (append.system is not None)
        self.chars += sum(message_chars(m) for m in append.messages)
        self.chars += len(append.system or "")
        for message in append.messages:
            for text in _result_texts(message):
                self.largest_result = max(self.largest_result, len(text))
                self.nul_results += "\x00" in text
        return version


def _result_texts(message: dict[str, Any]) -> Iterator[str]:
    if message.get("role") == "tool":
        yield str(message.get("content") or "")
    content = message.get("content")
    if message.get("role") == "user" and isinstance(content, list):
        for block in content:
            if block.get("type") == "tool_result":
                yield str(block.get("content") or "")


@dataclass(frozen=True)
class _Step:
    """One compaction the command made happen, as the run row recorded it."""

    role: DemoRole
    session_id: str
    run: dict[str, Any]
    note: str = ""


class _Demo:
    """The compaction steps: an overflow, an archive outage, a manual compact."""

    def __init__(
        self, api: Api, keys: dict[Profile, str], tracker: _Tracker, transcripts: _Transcripts
    ) -> None:
        self.api = api
        self.keys = keys
        self.tracker = tracker
        self.transcripts = transcripts
        self.steps: list[_Step] = []
        self.claimed: dict[str, SessionScript] = {}
        self.roles: dict[DemoRole, SessionScript] = {}
        for script in tracker.scenario.sessions:
            role = script.spec.demo
            if role is not None and role not in self.roles:
                self.roles[role] = script

    @property
    def own(self) -> set[str]:
        return {s.session_id for s in self.roles.values()}

    def claim(self, script: SessionScript) -> None:
        """Keep the worker off a session until the traffic is replayed: hold its relief claim,
        as a pending job would (ingest and the sweeper then enqueue nothing for it)."""
        for pk in _session(script).values_list("pk", flat=True):
            claim_relief(pk)
        self.claimed[script.session_id] = script

    def release(self) -> None:
        release_relief(_sessions(list(self.claimed.values())).values_list("pk", flat=True))
        self.claimed.clear()

    def hand_over(self, figures: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
        """Enqueue relief, as ingest would, for the sessions over prune_threshold that the
        command did not compact itself. Returns (those sessions, those enqueued)."""
        over = [
            s
            for s in self.tracker.scenario.sessions
            if s.session_id not in self.own
            and figures.get(s.session_id, {}).get("pressure_band") in ("prune", "compact", "over")
        ]
        ids = dict(_sessions(over).values_list("pk", "external_id"))
        enqueued = request_relief(
            list(ids), background=False
        )  # nothing when COMPACTION_AUTO_ENQUEUE is off
        return [s.session_id for s in over], [ids[pk] for pk in enqueued]

    def run(self) -> None:
        overflow = self.roles.get("overflow")
        if overflow is not None and overflow.overflow is not None:
            self.overflow(overflow, overflow.overflow)
        outage = self.roles.get("archive_outage")
        if outage is not None:
            self.archive_outage(outage)
        manual = self.roles.get("manual_compact")
        if manual is not None:
            self.manual_compact(manual)

    def _path(self, script: SessionScript, tail: str) -> str:
        return f"{SESSIONS}/{urllib.parse.quote(script.session_id, safe='')}/{tail}"

    def overflow(self, script: SessionScript, turn: OverflowTurn) -> None:
        """D4: the request with the pasted log is rejected; report it, retry on the new surface."""
        key = self.keys[script.spec.profile]
        pasted, reply = turn.appends()
        used = self.transcripts.send(pasted)
        path = self._path(script, "overflow")
        status, body = self.api.call(
            "POST", path, key, {"surface_version": used, "detail": turn.detail}
        )
        what = f"POST /{path} (surface version {used})"
        if status != 200 or not isinstance(body, dict) or body.get("status") != "applied":
            raise CommandError(f"{what}: expected 200 with an applied compaction: {status} {body}")
        new_version = body.get("surface_version")
        tokens_after = body.get("tokens_after")
        surface = body.get("surface")
        if not isinstance(new_version, int) or new_version <= used:
            raise CommandError(f"{what}: expected a newer surface version: {body}")
        if not isinstance(tokens_after, int) or not isinstance(surface, dict):
            raise CommandError(f"{what}: expected tokens_after and the new surface: {body}")
        # The agent rebuilds its request from the surface; it is the one the answer carried.
        status, current = self.api.call("GET", self._path(script, "surface"), key)
        if status != 200 or current != surface:
            raise CommandError(
                f"GET /{self._path(script, 'surface')}: expected the surface the overflow "
                f"answer returned (version {new_version}), got {status}"
            )
        retry = turn.retry(tokens_after)
        self.transcripts.versions[(retry.session_id, retry.turn, retry.call)] = new_version
        sub = Submission(script.spec.profile, (retry,), batch=False)
        status, answer = self.api.call("POST", TELEMETRY, key, sub.body(self.transcripts.versions))
        self.tracker.check(sub, status, answer, ["none"])
        self.transcripts.send(reply)
        self.steps.append(
            _Step(
                "overflow",
                script.session_id,
                body,
                f"rejected at ~{turn.rejected_tokens:,} tokens; retried at "
                f"{retry.context_tokens:,} on surface v{new_version}",
            )
        )

    def archive_outage(self, script: SessionScript) -> None:
        """D5's safety valve, on purpose: the automatic path compacts without an archive."""
        session = _session(script).get()
        outcome = relieve_session(session_id=session.pk, task_id="", archive=FailingArchive())
        self.claimed.pop(script.session_id, None)  # relieve_session released it
        run = outcome.run if outcome is not None else None
        if run is None or run.status != "applied" or run.archived or not run.archive_error:
            raise CommandError(
                f"automatic relief of {script.session_id} with an archive store that is down: expected an "
                f"applied run without an archive, got "
                f"{_run_fields(run) if run is not None else 'no run (busy)'}"
            )
        self.steps.append(
            _Step("archive_outage", script.session_id, _run_fields(run), "archive store down")
        )

    def manual_compact(self, script: SessionScript) -> None:
        """An operator's never-lossy compaction: archive first, then prune and summarize."""
        path = self._path(script, "compact")
        status, body = self.api.call("POST", path, self.keys[script.spec.profile], {})
        if (
            status != 200
            or not isinstance(body, dict)
            or body.get("status") != "applied"
            or not body.get("archived")
        ):
            raise CommandError(
                f"POST /{path}: expected 200 with an archived, applied run: {status} {body}"
            )
        self.steps.append(_Step("manual_compact", script.session_id, body))


def _session(script: SessionScript) -> QuerySet[AgentSession]:
    return _sessions([script])


def _sessions(scripts: list[SessionScript]) -> QuerySet[AgentSession]:
    match = Q(pk__in=[])
    for script in scripts:
        match |= Q(profile__name=script.spec.profile, external_id=script.session_id)
    return AgentSession.objects.filter(match)


def _run_fields(run: CompactionRun) -> dict[str, Any]:
    return {
        "run_id": run.pk,
        "mode": run.mode,
        "status": run.status,
        "action": run.action,
        "tokens_before": run.tokens_before,
        "tokens_after": run.tokens_after,
        "archived": run.archived,
        "archive_error": run.archive_error or None,
    }


class Command(BaseCommand):
    help = (
        "Seed demo data: drive a fleet of realistic agent sessions through the API (transcripts "
        "and telemetry), then show compaction: an overflow, a manual compact, and ONE automatic "
        "compaction run in-process with COMPACTION_ARCHIVE_BACKEND=FailingArchive. That run is a "
        "deliberate demo of D5's safety valve: it compacts without an archive, records "
        "archived=False with the error and logs one ERROR line. The other sessions over "
        "prune_threshold are left to the Celery worker."
    )

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
        parser.add_argument(
            "--no-compaction",
            action="store_true",
            help="only traffic: no overflow, manual compact or archive-outage run",
        )
        parser.add_argument(
            "--cache-demo",
            action="store_true",
            help="also send three sessions whose cache misses have every cause (make run does)",
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
        compaction = not options["no_compaction"]
        cache_demo: list[str] = []
        claude_code: list[str] = []
        transcripts = _Transcripts(api, keys, scenario)
        demo = _Demo(api, keys, tracker, transcripts)
        if compaction:
            transcripts.on_created = demo.claim
        with _released(demo):
            for sub, signals in zip(
                submissions, expected_signals(submissions, limits), strict=True
            ):
                transcripts.before(sub.records)
                status, body = api.call(
                    "POST", TELEMETRY, keys[sub.profile], sub.body(transcripts.versions)
                )
                tracker.check(sub, status, body, signals)
            transcripts.finish()
            traffic_seconds = time.monotonic() - started
            traffic_figures = dict(tracker.figures)  # as the traffic left them
            if compaction:
                demo.run()
            if options["cache_demo"]:
                # issue 13: misses with every cause the console names, on demo data
                cache_demo = send_cache_demo(api.call, keys, timezone.now())
                # issue 38: a Claude Code session under the 1h desktop profile, billed as
                # Claude Code bills it
                claude_code = send_claude_code_demo(api.call, keys["desktop"], timezone.now())
        left: tuple[list[str], list[str]] = ([], [])
        if compaction:
            left = demo.hand_over(traffic_figures)
        if not options["quiet"]:
            self._summary(scenario, submissions, tracker, traffic_figures, api, traffic_seconds)
            self._transcripts(transcripts)
            if compaction:
                self._compaction(demo, left, time.monotonic() - started)
            if cache_demo:
                self.stdout.write(f"Cache-miss causes demo: {', '.join(cache_demo)}.")
            if claude_code:
                self.stdout.write(
                    f"Claude Code demo (OTLP events, 1h profile): {', '.join(claude_code)}."
                )

    def _summary(
        self,
        scenario: Scenario,
        submissions: list[Submission],
        tracker: _Tracker,
        figures: dict[str, dict[str, Any]],
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
            f = figures.get(script.session_id, {})
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
        self._crossings(scenario, tracker, figures, out)

    def _crossings(
        self,
        scenario: Scenario,
        tracker: _Tracker,
        figures: dict[str, dict[str, Any]],
        out: Callable[[str], None],
    ) -> None:
        by_band: dict[str, list[str]] = {}
        for script in scenario.sessions:
            band = str(figures.get(script.session_id, {}).get("pressure_band"))
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

    def _transcripts(self, transcripts: _Transcripts) -> None:
        self.stdout.write(
            f"Transcripts: {transcripts.messages} messages ({transcripts.chars:,} chars) in "
            f"{transcripts.appends} appends; largest tool result {transcripts.largest_result:,} "
            f"chars, {transcripts.nul_results} with a NUL; every record carries the surface "
            "version its request used."
        )

    def _compaction(self, demo: _Demo, left: tuple[list[str], list[str]], seconds: float) -> None:
        out = self.stdout.write
        out(f"Compaction ({seconds:.1f} s in all):")
        labels = {
            "overflow": "overflow, agent retried",
            "archive_outage": "auto, archive down (D5)",
            "manual_compact": "manual /compact",
        }
        for step in demo.steps:
            run = step.run
            archived = (
                "archived" if run.get("archived") else f"NOT archived: {run['archive_error']}"
            )
            out(
                f"  {labels[step.role]:24} {step.session_id:30} {run['mode']:8} "
                f"{run['status']:8} {run['action']:16} "
                f"{run['tokens_before'] or 0:>8,} -> {run['tokens_after'] or 0:>8,} tokens  "
                f"{archived}{'; ' + step.note if step.note else ''}"
            )
        over, enqueued = left
        out(
            f"Left to the worker's relief jobs (over prune_threshold): {', '.join(over) or 'none'}."
        )
        out(
            f"  {len(enqueued)} relief jobs enqueued"
            + ("" if settings.COMPACTION_AUTO_ENQUEUE else " (COMPACTION_AUTO_ENQUEUE is off)")
            + "."
        )
        runs = Counter(
            (mode, status)
            for mode, status in CompactionRun.objects.filter(
                session__external_id__in=[s.session_id for s in demo.tracker.scenario.sessions]
            ).values_list("mode", "status")
        )
        out(
            "Compaction runs so far: "
            + (", ".join(f"{m}/{s} {n}" for (m, s), n in sorted(runs.items())) or "none")
            + "."
        )


@contextmanager
def _released(demo: _Demo) -> Iterator[None]:
    try:
        yield
    finally:
        demo.release()


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
