"""Values on their way to ingest's statements and rows on their way back: `prepare` (a field's
database value, skipped where Django's preparation would change nothing), `json_text` (a JSON
field's text for COPY), array literals of a column (`column_array`, `pairs_arrays`, `text_array`), and
`from_row` (a returned row as the stored model instance).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from telemetry.ingest.statements import vendor


def json_text(value: Any) -> str:
    """A JSON field's value as the text COPY hands to jsonb: what psycopg's Jsonb adapter sent
    (None is JSON null there too), without an adapter object and its lookup per value."""
    if value is None:
        return "null"
    if value == []:
        return "[]"
    if type(value) is dict and _ENCODE_JSON is not None:
        return "".join(_ENCODE_JSON(value, 0))
    return json.dumps(value)


# `json.dumps(value)` builds this C encoder (its default encoder's options) on every call; made
# once, the same text comes out with that set-up paid once per process. Without the
# circular-reference markers a decoded document cannot need.
_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # None without the C `_json`


_ESCAPE_ASCII = getattr(json.encoder, "c_encode_basestring_ascii", None)


_DEFAULT = json.JSONEncoder()  # what `json.dumps` without options encodes with


_ENCODE_JSON = (
    None
    if _MAKE_ENCODER is None or _ESCAPE_ASCII is None
    else _MAKE_ENCODER(
        None,
        _DEFAULT.default,
        _ESCAPE_ASCII,
        _DEFAULT.indent,
        _DEFAULT.key_separator,
        _DEFAULT.item_separator,
        _DEFAULT.sort_keys,
        _DEFAULT.skipkeys,
        _DEFAULT.allow_nan,
    )
)


# Fields whose `get_db_prep_save` gives a value of this exact type back as it is.
_PLAIN_TYPES: tuple[tuple[type[models.Field[Any, Any]], type], ...] = (
    (models.BooleanField, bool),
    (models.IntegerField, int),
    (models.CharField, str),
    (models.FloatField, float),
)


@functools.cache
def _plain_type(field: models.Field[Any, Any]) -> type | None:
    if isinstance(field, models.ForeignKey):  # its `get_db_prep_save` is its target field's
        return _plain_type(field.target_field)
    for field_class, kind in _PLAIN_TYPES:
        if isinstance(field, field_class):
            return kind
    return None


def prepare(field: models.Field[Any, Any], value: Any) -> Any:
    """`field.get_db_prep_save(value)`, skipped where it would change nothing (an int of an
    integer field, a NULL of a plain field): it is asked per value and statement, on every
    ingest (docs/performance.md, P2). On PostgreSQL a finite Decimal of a decimal field and
    an aware datetime of a datetime field come back as they are too (`to_python` and the
    backend's `adapt_*` return them unchanged), so a single record's Decimals skip Django's
    two `to_python` calls. Not on SQLite, which writes them as text."""
    kind = _plain_type(field)
    if kind is not None and (value is None or type(value) is kind):
        return value
    if vendor() != "postgresql":  # the hour rollups prepare their values on SQLite
        return field.get_db_prep_save(value, connection)  # too, which stores datetimes as text
    if type(value) is Decimal and isinstance(field, models.DecimalField) and value.is_finite():
        return value
    if (
        type(value) is datetime
        and value.tzinfo is not None
        and isinstance(field, models.DateTimeField)
    ):
        return value
    return field.get_db_prep_save(value, connection)


def column_array(column: tuple[Any, ...]) -> str | list[Any]:
    """A column of numbers (or NULLs) as PostgreSQL's array literal text, which the statement
    casts to the column's array type; any other column as a list for the driver to adapt.

    The driver adapts a list element by element in Python, per value of every column of a
    batch's turns; one literal per column is adapted once (docs/performance.md, P1).
    `str()` of an int or a Decimal is its exact literal (a Decimal never prints a NaN here:
    costs are finite), so the values stored are the same.
    """
    for value in column:
        kind = type(value)
        if kind is not int and kind is not Decimal and value is not None:
            return list(column)
    return "{" + ",".join("NULL" if v is None else str(v) for v in column) + "}"


def text_array(values: Iterable[str]) -> str:
    """Text as one PostgreSQL array literal, which the statement casts to `text[]`: each
    element in double quotes, its backslashes and double quotes escaped (the array syntax's
    only escapes there), so no element is NULL or split. The driver adapts a list of text in
    Python element by element (an OTLP export reads hundreds of request ids); the literal is
    one value. The same array either way (tests/db/test_otlp.py)."""
    escaped = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(escaped) + '"}' if escaped else "{}"


def pairs_arrays(keys: Sequence[Sequence[int]]) -> list[str]:
    """One integer array literal per position of the `keys` tuples (see `column_array`)."""
    return [column_array(column) for column in zip(*keys, strict=True)]  # type: ignore[misc]


def from_row(model: type[models.Model], names: Sequence[str], values: Sequence[Any]) -> Any:
    """`model.from_db(<default alias>, names, values)`: the stored instance of a row.

    A row of every concrete field in order (`names` their attnames) is set on a bare instance,
    as `Model.__init__` would set each, without it (its per-field loop and signals, for the
    session row a single-record ingest locks, docs/performance.md P2), unless something listens to
    the model's `pre_init` or `post_init`. Any other row goes to `from_db`.
    """
    alias = connections[DEFAULT_DB_ALIAS].alias
    if (
        tuple(names) != _attnames(model)
        or pre_init.has_listeners(model)
        or post_init.has_listeners(model)
    ):
        return model.from_db(alias, names, values)
    instance = model.__new__(model)
    state = ModelState()
    state.adding = False
    state.db = alias
    attributes = dict(zip(names, values, strict=True))
    attributes["_state"] = state
    instance.__dict__.update(attributes)
    return instance


@functools.cache
def _attnames(model: type[models.Model]) -> tuple[str, ...]:
    return tuple(f.attname for f in model._meta.concrete_fields)
