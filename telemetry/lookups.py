"""`field__any_of=[...]`: membership in a list sent as one array parameter on PostgreSQL.

`__in` spells a list of n values as n placeholders: for the hundreds of request ids or turn keys
of an OTLP export, building and sending that statement costs more than running it. On
PostgreSQL `any_of` sends `field = ANY(%s)` with the list as one array; elsewhere it is `__in`
itself (the same rows by definition: it is `In`, or `RelatedIn` on a foreign key, with only
the PostgreSQL spelling changed).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Field, ForeignObject
from django.db.models.fields.related_lookups import RelatedIn
from django.db.models.lookups import In


def _any_sql(lookup: In[Any], compiler: Any, connection: Any) -> tuple[str, list[Any]]:
    lhs, lhs_params = lookup.process_lhs(compiler, connection)
    values = [v for v in lookup.rhs if v is not None]  # as `In` drops None
    return f"{lhs} = ANY(%s)", [*lhs_params, values]


@Field.register_lookup
class AnyOf(In[Any]):
    lookup_name = "any_of"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return _any_sql(self, compiler, connection)


@ForeignObject.register_lookup
class RelatedAnyOf(RelatedIn):
    lookup_name = "any_of"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        return _any_sql(self, compiler, connection)
