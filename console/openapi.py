"""The OpenAPI document says every status an operation can answer (issue 16, item 13), and
every `$ref` in it resolves.

Routes declare their own successes and domain errors; the answers every route shares come
from the layers around them — the key check (401), the path lookup (404), the request guards
(400, 408, 411, 413, 414, 422), the server's header limit (431), the rate limit (429) and the
database guard (503, away or full) — and are added
here to each operation they apply to, with the shared error body.
"""

from __future__ import annotations

import copy
from typing import Any

from ninja import NinjaAPI

ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}

_ALL = {
    "414": "the URL is over `CONSOLE_MAX_URL_BYTES`; send long input in a body",
    "422": "a path or query parameter, or a body field, is invalid (`field` names it)",
    "431": "a request header is over the server's limit (8190 bytes)",
    "503": (
        "the database is not answering (`error`: `database_unavailable`) or has no space left "
        "(`database_full`); nothing was changed, retry after `Retry-After` seconds"
    ),
}
_AUTHENTICATED = {
    "401": "missing, unknown or revoked agent key",
    "403": "the key lacks the scope this operation needs",
    "429": "over the key's request rate; retry after `Retry-After` seconds",
}
_WITH_PATH = {"404": "no such object (or session) for this key's profile"}
_WITH_BODY = {
    "400": "the body is not UTF-8 or not JSON",
    "408": "the body was not received in time",
    "411": "a chunked body on a server that cannot decode it (gunicorn and `make run` do)",
    "413": "the body is over this endpoint's limit",
}


def hoist_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """Move the `$defs` that pydantic nests in hand-written bodies (`openapi_extra`) into
    `components.schemas`, and point their references there (in place).

    A route that reads its own body documents it with `Model.model_json_schema()`, whose nested
    models sit in a local `$defs` with `#/$defs/Name` references: inside an OpenAPI document
    those resolve against the document's root, where nothing is, so tools stop at them.
    """
    components = schema.setdefault("components", {}).setdefault("schemas", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for name, definition in node.pop("$defs", {}).items():
                components.setdefault(name, walk(definition))
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node["$ref"] = "#/components/schemas/" + ref.removeprefix("#/$defs/")
            for key, value in node.items():
                node[key] = walk(value)
        elif isinstance(node, list):
            return [walk(item) for item in node]
        return node

    walk(schema.get("paths", {}))
    return schema


def complete_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the shared error responses to every operation that can answer them (in place).

    Status keys become strings, as JSON writes them: ninja keys its own by integer, and an
    integer 404 beside a string "404" would be written as the same key twice."""
    schema.setdefault("components", {}).setdefault("schemas", {}).setdefault(
        "ErrorOut",
        {
            "type": "object",
            "properties": {"detail": {"type": "string"}, "field": {"type": ["string", "null"]}},
            "required": ["detail"],
        },
    )
    for item in schema.get("paths", {}).values():
        for method, operation in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            extra = dict(_ALL)
            if operation.get("security"):
                extra.update(_AUTHENTICATED)
            if any(
                p.get("in") == "path" or p.get("name") == "session_id"
                for p in operation.get("parameters", [])
            ):
                extra.update(_WITH_PATH)
            if method != "get":
                extra.update(_WITH_BODY)
            responses = operation.setdefault("responses", {})
            for status in list(responses):
                responses[str(status)] = responses.pop(status)
            for status, description in extra.items():
                responses.setdefault(
                    status,
                    {
                        "description": description,
                        "content": {"application/json": {"schema": ERROR_REF}},
                    },
                )
    return schema


class ConsoleAPI(NinjaAPI):
    """NinjaAPI whose OpenAPI document lists the shared error responses."""

    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        # a copy: ninja's document shares the routes' `openapi_extra` dicts, which hoisting edits
        schema = copy.deepcopy(super().get_openapi_schema(*args, **kwargs))
        hoist_definitions(schema)
        complete_responses(schema)
        return schema
