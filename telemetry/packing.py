"""Packed storage of idle sessions' calls and turns on PostgreSQL (docs/scaling.md).

A row per call costs its header, its alignment and three index entries whatever it holds: about
360 bytes a call with its share of the turns, more than the storage bar allows (250 MiB per million calls). So
on PostgreSQL the calls and the turns of a session that has been idle for a while are *packed*:
moved, in one transaction under the session's lock, into one row per chunk of at most
`CHUNK` positions of that session: one array of the hot table's rows, compressed with lz4 as
one value (TOAST), where a session's rows repeat their model, provider, keys and headers.

Every reader sees one relation as before. For each packed model (`PACKED`):

- `<table>_hot` is the table of the rows as stored one by one (what was `<table>`, its indexes
  and constraints renamed with it): every session that is not packed;
- `<table>_packed` holds the packed chunks: the session, the chunk's number, and the array of
  its rows (the hot table's row type) in the session's order (`order`); the turns' chunks also
  the bound retention finds them by (`Expiry`);
- `<table>`, the model's own name, is a view: the hot rows `UNION ALL` the packed ones unnested.
  The ORM reads it unchanged; a read restricted to a session is an index probe on both.
  `INSTEAD OF` triggers make the ORM's rare writes through it (a repricing, an import, the
  retention's deletes) land in the hot table, unpacking the row's session first.

Ingest writes the hot tables by name (`stored_table`), and only after it has locked its
sessions (`session_state.lock_sessions`), whose upsert sets the session's `packed` flag false:
a trigger on the sessions table unpacks a session when that flag goes from true to false, in
the same transaction. So a late call to a packed session finds its stored neighbours for the
idempotency check and the turn derivation exactly as in a session that was never packed.

`pack_idle_sessions` (the hourly beat job, `telemetry.tasks`) packs sessions idle for
`TELEMETRY_PACK_IDLE_SECONDS`, a bounded number per run. The `packed` column of the sessions
table is the database's alone: the model does not declare it, so no ORM write can set it.

SQLite stores every row in the model's table: nothing here applies there (`installed`).

A migration that changes the columns of a packed model must first `uninstall` (every session
unpacked, the hot table back under the model's name), then change the table, then `install`
again (see migration 0035 for the pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Field, Model
from django.utils import timezone

# Sessions packed by one run of `pack_idle_sessions`: one transaction, its locks held briefly.
PACK_BATCH: Final = 200

# At most this many positions (calls, turns) of one session in one packed row: a read of one
# call decompresses its chunk's columns, not a whole long session's.
CHUNK = 100


@dataclass(frozen=True)
class Expiry:
    """A packed chunk's `expires_at`, set when it is packed: the oldest `at` among its rows
    whose `position` is not their session's `latest` (NULL when there is none); and its
    session's `scope` (the profile, part of a session's identity), beside it.

    Retention removes a row only when it is not its session's latest and older than its
    profile's cut-off (`telemetry.retention.expired_turns`), so a chunk holds such a row only
    if its `expires_at` is before that cut-off: retention and its preview find their packed
    candidates by an index on (`scope`, `expires_at`), one range per profile, instead of
    unnesting every chunk (or reading the chunks of a profile that keeps everything). A
    session whose only old row is its latest one is no candidate. A write to a packed session
    unpacks it, so the session's `latest` cannot change while its chunks stand."""

    at: str  # the row's field: "last_at"
    position: str  # the row's field: "turn"
    latest: str  # the session's field: "last_turn"
    scope: str  # the session's field: "profile"


@dataclass(frozen=True)
class Packed:
    """A model stored packed: its rows are ordered by `order` within their session."""

    label: str  # "telemetry.LLMCall"
    order: tuple[str, ...]
    expiry: Expiry | None = None


PACKED = (
    Packed("telemetry.LLMCall", ("turn", "call")),
    Packed("telemetry.Turn", ("turn",), Expiry("last_at", "turn", "last_turn", "profile")),
)
SESSION_LABEL = "telemetry.AgentSession"


def installed() -> bool:
    """Whether this database packs (PostgreSQL): the hot tables and views exist."""
    return connection.vendor == "postgresql"


def stored_table(model: type[Model]) -> str:
    """The table a writer or ingest's own SQL names for `model`'s rows: its hot table where the
    model is packed (`installed`), else its own."""
    table = model._meta.db_table
    if model._meta.label in _LABELS and installed():
        return f"{table}_hot"
    return table


_LABELS = frozenset(p.label for p in PACKED)


def locking_set(model: type[Model]) -> str | None:
    """The `SET` of the upsert that locks a row of `model` for a writer (`upserts.lock_keys`):
    for a session where sessions pack, clearing its `packed` flag, which unpacks it in the same
    statement (the trigger `install` creates); None for any other (the caller's no-op `SET`)."""
    if model._meta.label == SESSION_LABEL and installed():
        return "packed = false"
    return None


def _q(name: str) -> str:
    """A PostgreSQL identifier, quoted (`connection.ops.quote_name`'s form there)."""
    return f'"{name}"'


@dataclass(frozen=True)
class _Shape:
    """The SQL names of one packed model, from its (possibly historical) model class."""

    view: str
    hot: str
    packed: str
    session: str  # the session column
    columns: tuple[str, ...]  # every column, in the model's field order
    order: tuple[str, ...]  # the order's columns
    sessions: str  # the sessions' table
    # the `Expiry`'s columns: the row's time and position, the session's latest and scope
    expiry: tuple[str, str, str, str] | None


def _shape(model: type[Model], spec: Packed, session_model: type[Model]) -> _Shape:
    fields = list(model._meta.concrete_fields)
    by_name = {f.name: f for f in fields}
    expiry = None
    if spec.expiry is not None:
        expiry = (
            by_name[spec.expiry.at].column,
            by_name[spec.expiry.position].column,
            _column(session_model, spec.expiry.latest),
            _column(session_model, spec.expiry.scope),
        )
    return _Shape(
        view=model._meta.db_table,
        hot=f"{model._meta.db_table}_hot",
        packed=f"{model._meta.db_table}_packed",
        session=by_name["session"].column,
        columns=tuple(f.column for f in fields),
        order=tuple(by_name[name].column for name in spec.order),
        sessions=session_model._meta.db_table,
        expiry=expiry,
    )


def _column(model: type[Model], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.column, name
    return field.column


def expiry_index(model: type[Model]) -> str:
    """The index of `model`'s packed chunks on their scope and `expires_at` (`Expiry`)."""
    return f"{model._meta.db_table}_packed_expires"


def _install_model(shape: _Shape) -> list[str]:
    q = _q
    sessions = shape.sessions
    columns = ", ".join(q(c) for c in shape.columns)
    new_values = ", ".join(f"NEW.{q(c)}" for c in shape.columns)
    fn = f"{shape.view}_write"

    def packed_alias(column: str) -> str:
        return "p" if column == shape.session else "u"

    def unpack(row: str) -> str:
        return (
            f"UPDATE {q(sessions)} SET packed = false "
            f"WHERE id = {row}.{q(shape.session)} AND packed;"
        )

    expires = ""
    if shape.expiry is not None:
        expires = f", {q(shape.expiry[3])} bigint NOT NULL, expires_at timestamptz"
    statements = [
        f"ALTER TABLE {q(shape.view)} RENAME TO {q(shape.hot)}",
        # A chunk is one array of the hot table's rows, compressed as one value: the rows of a
        # session repeat their model, provider, keys and headers, which one value compresses
        # away (one array per column compressed each apart took half as much again).
        f"CREATE TABLE {q(shape.packed)} ({q(shape.session)} bigint NOT NULL, "
        f"chunk integer NOT NULL, stored {q(shape.hot)}[] COMPRESSION lz4 NOT NULL{expires}, "
        f"PRIMARY KEY ({q(shape.session)}, chunk)) WITH (toast_tuple_target = 128)",
        f"CREATE VIEW {q(shape.view)} AS SELECT {columns} FROM {q(shape.hot)} "
        # the chunk's own session column, not its rows': a filter on the session is then an
        # index probe of the chunks, not a filter of every chunk's unnested rows
        f"UNION ALL SELECT {', '.join(f'{packed_alias(c)}.{q(c)}' for c in shape.columns)} "
        f"FROM {q(shape.packed)} AS p CROSS JOIN LATERAL unnest(p.stored) AS u",
        # an ORM insert names no id: the hot table's sequence gives it
        f"ALTER VIEW {q(shape.view)} ALTER COLUMN id SET DEFAULT "
        f"nextval(pg_get_serial_sequence('{q(shape.hot)}', 'id'))",
        # The ORM's writes through the view: to the hot table, the row's session unpacked first
        # (a packed row is found only there after it), so its unique keys are checked against
        # every stored row of the session.
        f"""CREATE FUNCTION {q(fn)}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    {unpack("NEW")}
    INSERT INTO {q(shape.hot)} ({columns}) VALUES ({new_values});
    RETURN NEW;
  END IF;
  FOR attempt IN 1..2 LOOP
    IF TG_OP = 'UPDATE' THEN
      UPDATE {q(shape.hot)} SET ({columns}) = ({new_values}) WHERE id = OLD.id;
    ELSE
      DELETE FROM {q(shape.hot)} WHERE id = OLD.id;
    END IF;
    IF FOUND THEN
      RETURN CASE WHEN TG_OP = 'UPDATE' THEN NEW ELSE OLD END;
    END IF;
    {unpack("OLD")}
  END LOOP;
  RETURN NULL;
END $$""",
        f"CREATE TRIGGER {q(fn)} INSTEAD OF INSERT OR UPDATE OR DELETE ON {q(shape.view)} "
        f"FOR EACH ROW EXECUTE FUNCTION {q(fn)}()",
    ]
    if shape.expiry is not None:
        # retention's packed candidates (`Expiry`), their sessions read from the index alone
        statements.append(
            f"CREATE INDEX {q(shape.packed + '_expires')} ON {q(shape.packed)} "
            f"({q(shape.expiry[3])}, expires_at, {q(shape.session)}) "
            "WHERE expires_at IS NOT NULL"
        )
    return statements


def _pack_statement(shape: _Shape) -> str:
    """Move the hot rows of the sessions `ids` (bigint[]) into chunks of at most `CHUNK`, in
    their session's order. One statement, whose DELETE gives the rows it packs: a row another
    transaction is deleting (retention, which takes no lock on a hot session) is waited for
    and packed only if it survives; an INSERT … SELECT before the DELETE would pack it anyway."""
    q = _q
    order = ", ".join(f"(g.h).{q(c)}" for c in shape.order)
    session = f"(g.h).{q(shape.session)}"
    number = f"row_number() OVER (PARTITION BY {session} ORDER BY {order}) AS n"
    gone = (
        f"WITH gone AS (DELETE FROM {q(shape.hot)} AS h "
        f"WHERE h.{q(shape.session)} = ANY(ids) RETURNING h) "
    )
    if shape.expiry is None:
        return (
            f"{gone}INSERT INTO {q(shape.packed)} ({q(shape.session)}, chunk, stored) "
            f"SELECT r.sid, (r.n - 1) / {CHUNK}, array_agg(r.h ORDER BY r.n) FROM ("
            f"SELECT g.h, {session} AS sid, {number} FROM gone AS g) AS r "
            f"GROUP BY r.sid, (r.n - 1) / {CHUNK}"
        )
    at, position, latest, scope = (q(c) for c in shape.expiry)
    return (
        f"{gone}INSERT INTO {q(shape.packed)} ({q(shape.session)}, chunk, stored, {scope}, "
        f"expires_at) SELECT r.sid, (r.n - 1) / {CHUNK}, array_agg(r.h ORDER BY r.n), "
        f"min(r.scope), "
        f"min((r.h).{at}) FILTER (WHERE (r.h).{position} IS DISTINCT FROM r.latest) FROM ("
        f"SELECT g.h, {session} AS sid, s.{latest} AS latest, s.{scope} AS scope, {number} "
        f"FROM gone AS g JOIN {q(shape.sessions)} AS s ON s.id = {session}) AS r "
        f"GROUP BY r.sid, (r.n - 1) / {CHUNK}"
    )


def _unpack_statement(shape: _Shape) -> str:
    """Move the packed chunks of the session `sid` back to the hot table."""
    q = _q
    return (
        f"WITH gone AS (DELETE FROM {q(shape.packed)} WHERE {q(shape.session)} = sid "
        f"RETURNING stored) INSERT INTO {q(shape.hot)} "
        "SELECT u.* FROM gone CROSS JOIN LATERAL unnest(gone.stored) AS u"
    )


def install_statements(models: Sequence[type[Model]], session_model: type[Model]) -> list[str]:
    """The statements that create the packed storage of `models` (PACKED's, in order; the
    historical models in a migration, which keeps them frozen: `run_statements`)."""
    sessions = session_model._meta.db_table
    shapes = [_shape(m, spec, session_model) for m, spec in zip(models, PACKED, strict=True)]
    q = _q
    statements = [f"ALTER TABLE {q(sessions)} ADD COLUMN packed boolean NOT NULL DEFAULT false"]
    for shape in shapes:
        statements += _install_model(shape)
    unpacks = ";\n  ".join(_unpack_statement(s) for s in shapes)
    packs = ";\n  ".join(_pack_statement(shape) for shape in shapes)
    statements.append(
        f"""CREATE FUNCTION telemetry_unpack_session() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE sid bigint := OLD.id;
BEGIN
  {unpacks};
  RETURN NEW;
END $$"""
    )
    # Truncating the sessions (`manage.py flush`, the tests' flush) truncates their rows in
    # the tables the model's name no longer is (Django truncates tables, not views).
    stored = ", ".join(q(name) for shape in shapes for name in (shape.hot, shape.packed))
    statements.append(
        f"""CREATE FUNCTION telemetry_truncate_stored() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  TRUNCATE {stored};
  RETURN NULL;
END $$"""
    )
    statements.append(
        f"CREATE TRIGGER telemetry_truncate_stored BEFORE TRUNCATE ON {q(sessions)} "
        "FOR EACH STATEMENT EXECUTE FUNCTION telemetry_truncate_stored()"
    )
    # `pack_idle_sessions`' candidates, oldest first
    statements.append(
        f"CREATE INDEX telemetry_session_unpacked ON {q(sessions)} (last_seen_at) WHERE NOT packed"
    )
    statements.append(
        f"CREATE TRIGGER telemetry_unpack_session BEFORE UPDATE OF packed ON {q(sessions)} "
        "FOR EACH ROW WHEN (OLD.packed AND NOT NEW.packed) "
        "EXECUTE FUNCTION telemetry_unpack_session()"
    )
    statements.append(
        f"""CREATE FUNCTION telemetry_pack_sessions(ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  -- a session packed already (and written since) is unpacked first: it is packed whole
  UPDATE {q(sessions)} SET packed = false WHERE id = ANY(ids) AND packed;
  {packs};
  UPDATE {q(sessions)} SET packed = true WHERE id = ANY(ids);
END $$"""
    )
    return statements


def uninstall_statements(models: Sequence[type[Model]], session_model: type[Model]) -> list[str]:
    """`install_statements`' reverse: every session unpacked, each hot table back under its
    model's name (a migration changing a packed model's columns runs them first)."""
    sessions = session_model._meta.db_table
    shapes = [_shape(m, spec, session_model) for m, spec in zip(models, PACKED, strict=True)]
    q = _q
    statements = [f"UPDATE {q(sessions)} SET packed = false WHERE packed"]
    statements += [
        "DROP FUNCTION telemetry_pack_sessions(bigint[])",
        f"DROP TRIGGER telemetry_unpack_session ON {q(sessions)}",
        "DROP FUNCTION telemetry_unpack_session()",
        f"DROP TRIGGER telemetry_truncate_stored ON {q(sessions)}",
        "DROP FUNCTION telemetry_truncate_stored()",
        "DROP INDEX telemetry_session_unpacked",
        f"ALTER TABLE {q(sessions)} DROP COLUMN packed",
    ]
    for shape in shapes:
        statements += [
            f"DROP VIEW {q(shape.view)}",
            f"DROP FUNCTION {q(shape.view + '_write')}()",
            f"DROP TABLE {q(shape.packed)}",
            f"ALTER TABLE {q(shape.hot)} RENAME TO {q(shape.view)}",
        ]
    return statements


def run_statements(editor: BaseDatabaseSchemaEditor, statements: Sequence[str]) -> None:
    """Run `install_statements` or `uninstall_statements` on PostgreSQL; nothing elsewhere."""
    if editor.connection.vendor != "postgresql":
        return
    for statement in statements:
        editor.execute(statement, params=None)


def pack_sessions(session_ids: Sequence[int]) -> None:
    """Pack the calls and turns of `session_ids` (PostgreSQL). The caller holds their locks,
    taken so that it waits for no writer (`pack_idle_sessions`' SKIP LOCKED): the function's
    own updates of the session rows take them in no particular order, which beside a batch
    locking its sessions in its order could deadlock."""
    if not session_ids or not installed():
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT telemetry_pack_sessions(%s::bigint[])", [list(session_ids)])


def unpack_sessions(session_ids: Sequence[int]) -> None:
    """Move the packed calls and turns of `session_ids` back to the hot tables (PostgreSQL),
    locking their sessions until the end of the caller's transaction."""
    if not session_ids or not installed():
        return
    from telemetry.models import AgentSession

    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_q(AgentSession._meta.db_table)} SET packed = false "
            "WHERE id = ANY(%s::bigint[]) AND packed",
            [list(session_ids)],
        )


@dataclass(frozen=True)
class PackRun:
    sessions: int
    has_more: bool


def pack_idle_sessions(*, now: datetime | None = None, limit: int = PACK_BATCH) -> PackRun:
    """Pack at most `limit` sessions idle for `TELEMETRY_PACK_IDLE_SECONDS`, oldest first, in
    one transaction; a session a writer holds is left for the next run (SKIP LOCKED)."""
    idle = settings.TELEMETRY_PACK_IDLE_SECONDS
    if not installed() or idle <= 0:
        return PackRun(0, False)
    from telemetry.models import AgentSession

    cutoff = (now or timezone.now()) - timedelta(seconds=idle)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {_q(AgentSession._meta.db_table)} "
            "WHERE NOT packed AND last_seen_at < %s ORDER BY last_seen_at "
            "LIMIT %s FOR UPDATE SKIP LOCKED",
            [cutoff, limit],
        )
        ids = [row[0] for row in cursor.fetchall()]
        if ids:
            cursor.execute("SELECT telemetry_pack_sessions(%s::bigint[])", [ids])
    return PackRun(len(ids), len(ids) == limit)
