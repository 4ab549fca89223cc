"""The one domain error with a field: what every layer raises for input it refuses (pure).

A refused value is always the same three things: the `field` it is in (a dotted path such as
`messages.3.seq` or `usage.prompt_tokens_details.cached_tokens`), a `message` in words, and the
HTTP `status` the API answers with. Policies, profiles, usage objects, OTLP bodies, window
overrides, unsafe JSON, request bodies and transcript appends all raise this one class, and
`console.api` maps it to `{"detail": "<field>: <message>", "field": <field>}` with `status` in
one handler; forms and commands show `field` and `message` the same way.

It lives in telemetry (the lower layer) with no Django import, so telemetry's pure modules and
compaction can both raise it (the dependency rule: compaction may import telemetry, never the
reverse). A `ValueError`, so code that validates values keeps catching it as one; an unexpected
bare `ValueError` is never turned into a 422 — it is a bug and answers 500.
"""

from __future__ import annotations


class FieldError(ValueError):
    """Input refused at `field` (dotted path) for `message`; `status` is the HTTP answer.

    422 by default (a value is invalid); 400 for a body that cannot be read at all, 409 for a
    conflict with what is stored, 413/415 for the OTLP wire.
    """

    def __init__(self, field: str, message: str, *, status: int = 422) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


def refuse_unknown(names: object, allowed: frozenset[str]) -> None:
    """A query parameter a route does not take is refused, naming it: a misspelt filter
    (`bnad=over`) must not answer as if there were none (every session, everything exported).
    `names`: the request's parameter names (`request.GET`)."""
    unknown = sorted(set(names) - allowed)  # type: ignore[call-overload]
    if unknown:
        listed = ", ".join(sorted(allowed)) or "none"
        raise FieldError(unknown[0] or "(blank)", f"not a parameter of this route ({listed})")
