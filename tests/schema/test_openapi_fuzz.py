"""Schemathesis against a live test server (issue 16): every operation of the OpenAPI schema,
seeded and bounded, must answer no 5xx and pass every check schemathesis has (`--checks all`),
but for the few a rule of an operation makes inapplicable (`NOT_APPLICABLE`, each with why).

`make test` runs this as its own stage (on PostgreSQL when it is up, else SQLite). The budget:
`SCHEMATHESIS_MAX_EXAMPLES` cases per operation (default 50; 100 also passes), derandomized, so a run is the
same every time and stays under two minutes.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks

from console.api import api
from telemetry.keys import create_agent_key
from telemetry.seeding import ensure_defaults

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "50"))
load_all_checks()
# Every check schemathesis has (`--checks all`): server errors, status codes, content types,
# headers and bodies against the schema, schema-violating data refused (ST201), schema-valid
# data accepted (ST202), missing auth, unsupported methods, and the stateful ones.
ALL_CHECKS = list(CHECKS.get_all())

# A check that cannot hold for an operation is turned off for that operation only, saying why.
NOT_APPLICABLE: dict[tuple[str, str], set[str]] = {
    # Records are judged one by one (one bad record never drops the batch): an invalid record
    # is answered 200 with `invalid` in its item, not a refusal of the request (ST201). And
    # `usage` takes every provider's shape, whose required counts depend on the provider: a
    # schema-valid usage object may still be refused 422 for the provider it names (ST202).
    ("POST", "/api/v1/telemetry"): {"negative_data_rejection", "positive_data_acceptance"},
    # `seq` must continue the stored log (and a result follow its call): a rule about stored
    # state that no schema can express, so schema-valid messages may be refused 422 (ST202).
    ("POST", "/api/v1/sessions/{session_id}/messages"): {"positive_data_acceptance"},
    # The body must be a Claude Code or Codex transcript (JSON lines of their shapes), which a
    # JSON Schema of a string cannot say: any other text is refused 422 (ST202).
    # And a body of another type than string cannot be sent: the serializer below writes any
    # generated value as text, which is a valid body, so its "negative" bodies are not (ST201).
    ("POST", "/api/v1/imports"): {"positive_data_acceptance", "negative_data_rejection"},
    # A cursor is opaque: valid only as this API wrote it, for the same filters and sort (or
    # session). Any other schema-valid string is refused 422 on `cursor` (ST202).
    ("GET", "/api/v1/sessions"): {"positive_data_acceptance"},
    ("GET", "/api/v1/sessions/{session_id}/compactions"): {"positive_data_acceptance"},
    # A period (`console.periods`) is a rule across fields: `from` and `to` go together, `to`
    # after `from` and at most 400 days later, `range` not beside them; and `tz` must be a zone
    # of the server's tz database. Schema-valid values may be refused 422 naming the field.
    ("GET", "/api/v1/overview"): {"positive_data_acceptance"},
    # A rule's `target` must fit its `channel` (a URL resolving to a public address over https,
    # or an email address) and event-counting metrics need a window: rules across fields and
    # about the network that no schema can express, so schema-valid rules may be refused 422.
    ("POST", "/api/v1/alerts/rules"): {"positive_data_acceptance"},
    ("PUT", "/api/v1/alerts/rules/{rule_id}"): {"positive_data_acceptance"},
}


@pytest.fixture
def agent_headers(transactional_db: None) -> dict[str, str]:
    ensure_defaults()
    issued = create_agent_key(profile_name="default", scopes=("compact",), name="fuzz")
    return {"Authorization": f"Bearer {issued.plaintext}"}


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """Transcript imports take JSON lines: send what was generated as text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode()


# The schema the server publishes at /api/openapi.json, read in-process: the same document.
schema = schemathesis.openapi.from_dict(
    json.loads(json.dumps(api.get_openapi_schema(path_prefix="/api")))
)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_error_and_no_schema_violation(
    case: Any, live_server: Any, agent_headers: dict[str, str]
) -> None:
    skipped = NOT_APPLICABLE.get((case.method.upper(), case.operation.path), set())
    checks = [check for check in ALL_CHECKS if check.__name__ not in skipped]
    case.call_and_validate(base_url=live_server.url, headers=agent_headers, checks=checks)
