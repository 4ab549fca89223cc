"""Idle sessions' calls and turns stored packed on PostgreSQL (`telemetry.packing`): the
tables become `<table>_hot`, each gains a `<table>_packed` beside it, and the model's name a
view over the two; each chunk of turns carries the bound retention finds it by
(`expires_at`, indexed: `telemetry.packing.Expiry`). A context event's link to its call loses
its database constraint: a packed call is a row of the view, which no constraint can name
(the ORM still sets the link to NULL when its call is removed). Nothing changes on SQLite.

The statements are `telemetry.packing.install_statements` and `uninstall_statements` for the
models of this migration's day, written out: a migration never runs the live code
(tests/db/test_migrations.py holds them equal).
"""

import django.db.models.deletion
from django.db import migrations, models

INSTALL = [
    'ALTER TABLE "telemetry_agentsession" ADD COLUMN packed boolean NOT NULL DEFAULT false',
    'ALTER TABLE "telemetry_llmcall" RENAME TO "telemetry_llmcall_hot"',
    'CREATE TABLE "telemetry_llmcall_packed" ("session_id" bigint NOT NULL, chunk integer NOT NULL, stored "telemetry_llmcall_hot"[] COMPRESSION lz4 NOT NULL, PRIMARY KEY ("session_id", chunk)) WITH (toast_tuple_target = 128)',
    'CREATE VIEW "telemetry_llmcall" AS SELECT "id", "turn", "call", "request_id", "model", "provider", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "reported_cache", "context_tokens", "raw_usage", "flags", "request_chars", "appended_chars", "window_tokens", "surface_version", "at", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "long_context", "payload_hash", "received_at", "session_id", "prefix", "provider_diagnostics", "provider_miss_type", "provider_missed_tokens" FROM "telemetry_llmcall_hot" UNION ALL SELECT u."id", u."turn", u."call", u."request_id", u."model", u."provider", u."uncached_input", u."cache_read", u."cache_write_5m", u."cache_write_1h", u."output", u."reasoning_output", u."reported_cache", u."context_tokens", u."raw_usage", u."flags", u."request_chars", u."appended_chars", u."window_tokens", u."surface_version", u."at", u."cost_uncached_input", u."cost_cache_read", u."cost_cache_write_5m", u."cost_cache_write_1h", u."cost_output", u."cost_usd", u."no_cache_cost_usd", u."long_context", u."payload_hash", u."received_at", p."session_id", u."prefix", u."provider_diagnostics", u."provider_miss_type", u."provider_missed_tokens" FROM "telemetry_llmcall_packed" AS p CROSS JOIN LATERAL unnest(p.stored) AS u',
    "ALTER VIEW \"telemetry_llmcall\" ALTER COLUMN id SET DEFAULT nextval(pg_get_serial_sequence('\"telemetry_llmcall_hot\"', 'id'))",
    'CREATE FUNCTION "telemetry_llmcall_write"() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n  IF TG_OP = \'INSERT\' THEN\n    UPDATE "telemetry_agentsession" SET packed = false WHERE id = NEW."session_id" AND packed;\n    INSERT INTO "telemetry_llmcall_hot" ("id", "turn", "call", "request_id", "model", "provider", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "reported_cache", "context_tokens", "raw_usage", "flags", "request_chars", "appended_chars", "window_tokens", "surface_version", "at", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "long_context", "payload_hash", "received_at", "session_id", "prefix", "provider_diagnostics", "provider_miss_type", "provider_missed_tokens") VALUES (NEW."id", NEW."turn", NEW."call", NEW."request_id", NEW."model", NEW."provider", NEW."uncached_input", NEW."cache_read", NEW."cache_write_5m", NEW."cache_write_1h", NEW."output", NEW."reasoning_output", NEW."reported_cache", NEW."context_tokens", NEW."raw_usage", NEW."flags", NEW."request_chars", NEW."appended_chars", NEW."window_tokens", NEW."surface_version", NEW."at", NEW."cost_uncached_input", NEW."cost_cache_read", NEW."cost_cache_write_5m", NEW."cost_cache_write_1h", NEW."cost_output", NEW."cost_usd", NEW."no_cache_cost_usd", NEW."long_context", NEW."payload_hash", NEW."received_at", NEW."session_id", NEW."prefix", NEW."provider_diagnostics", NEW."provider_miss_type", NEW."provider_missed_tokens");\n    RETURN NEW;\n  END IF;\n  FOR attempt IN 1..2 LOOP\n    IF TG_OP = \'UPDATE\' THEN\n      UPDATE "telemetry_llmcall_hot" SET ("id", "turn", "call", "request_id", "model", "provider", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "reported_cache", "context_tokens", "raw_usage", "flags", "request_chars", "appended_chars", "window_tokens", "surface_version", "at", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "long_context", "payload_hash", "received_at", "session_id", "prefix", "provider_diagnostics", "provider_miss_type", "provider_missed_tokens") = (NEW."id", NEW."turn", NEW."call", NEW."request_id", NEW."model", NEW."provider", NEW."uncached_input", NEW."cache_read", NEW."cache_write_5m", NEW."cache_write_1h", NEW."output", NEW."reasoning_output", NEW."reported_cache", NEW."context_tokens", NEW."raw_usage", NEW."flags", NEW."request_chars", NEW."appended_chars", NEW."window_tokens", NEW."surface_version", NEW."at", NEW."cost_uncached_input", NEW."cost_cache_read", NEW."cost_cache_write_5m", NEW."cost_cache_write_1h", NEW."cost_output", NEW."cost_usd", NEW."no_cache_cost_usd", NEW."long_context", NEW."payload_hash", NEW."received_at", NEW."session_id", NEW."prefix", NEW."provider_diagnostics", NEW."provider_miss_type", NEW."provider_missed_tokens") WHERE id = OLD.id;\n    ELSE\n      DELETE FROM "telemetry_llmcall_hot" WHERE id = OLD.id;\n    END IF;\n    IF FOUND THEN\n      RETURN CASE WHEN TG_OP = \'UPDATE\' THEN NEW ELSE OLD END;\n    END IF;\n    UPDATE "telemetry_agentsession" SET packed = false WHERE id = OLD."session_id" AND packed;\n  END LOOP;\n  RETURN NULL;\nEND $$',
    'CREATE TRIGGER "telemetry_llmcall_write" INSTEAD OF INSERT OR UPDATE OR DELETE ON "telemetry_llmcall" FOR EACH ROW EXECUTE FUNCTION "telemetry_llmcall_write"()',
    'ALTER TABLE "telemetry_turn" RENAME TO "telemetry_turn_hot"',
    'CREATE TABLE "telemetry_turn_packed" ("session_id" bigint NOT NULL, chunk integer NOT NULL, stored "telemetry_turn_hot"[] COMPRESSION lz4 NOT NULL, "profile_id" bigint NOT NULL, expires_at timestamptz, PRIMARY KEY ("session_id", chunk)) WITH (toast_tuple_target = 128)',
    'CREATE VIEW "telemetry_turn" AS SELECT "id", "turn", "calls", "context_tokens", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "cache_reported_calls", "cache_read_reported", "cache_denominator", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "unpriced_calls", "first_at", "last_at", "model", "last_call", "last_call_context_tokens", "last_call_output", "last_call_reasoning_output", "last_call_appended_chars", "last_call_window_tokens", "surface_version", "session_id" FROM "telemetry_turn_hot" UNION ALL SELECT u."id", u."turn", u."calls", u."context_tokens", u."uncached_input", u."cache_read", u."cache_write_5m", u."cache_write_1h", u."output", u."reasoning_output", u."cache_reported_calls", u."cache_read_reported", u."cache_denominator", u."cost_uncached_input", u."cost_cache_read", u."cost_cache_write_5m", u."cost_cache_write_1h", u."cost_output", u."cost_usd", u."no_cache_cost_usd", u."unpriced_calls", u."first_at", u."last_at", u."model", u."last_call", u."last_call_context_tokens", u."last_call_output", u."last_call_reasoning_output", u."last_call_appended_chars", u."last_call_window_tokens", u."surface_version", p."session_id" FROM "telemetry_turn_packed" AS p CROSS JOIN LATERAL unnest(p.stored) AS u',
    "ALTER VIEW \"telemetry_turn\" ALTER COLUMN id SET DEFAULT nextval(pg_get_serial_sequence('\"telemetry_turn_hot\"', 'id'))",
    'CREATE FUNCTION "telemetry_turn_write"() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n  IF TG_OP = \'INSERT\' THEN\n    UPDATE "telemetry_agentsession" SET packed = false WHERE id = NEW."session_id" AND packed;\n    INSERT INTO "telemetry_turn_hot" ("id", "turn", "calls", "context_tokens", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "cache_reported_calls", "cache_read_reported", "cache_denominator", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "unpriced_calls", "first_at", "last_at", "model", "last_call", "last_call_context_tokens", "last_call_output", "last_call_reasoning_output", "last_call_appended_chars", "last_call_window_tokens", "surface_version", "session_id") VALUES (NEW."id", NEW."turn", NEW."calls", NEW."context_tokens", NEW."uncached_input", NEW."cache_read", NEW."cache_write_5m", NEW."cache_write_1h", NEW."output", NEW."reasoning_output", NEW."cache_reported_calls", NEW."cache_read_reported", NEW."cache_denominator", NEW."cost_uncached_input", NEW."cost_cache_read", NEW."cost_cache_write_5m", NEW."cost_cache_write_1h", NEW."cost_output", NEW."cost_usd", NEW."no_cache_cost_usd", NEW."unpriced_calls", NEW."first_at", NEW."last_at", NEW."model", NEW."last_call", NEW."last_call_context_tokens", NEW."last_call_output", NEW."last_call_reasoning_output", NEW."last_call_appended_chars", NEW."last_call_window_tokens", NEW."surface_version", NEW."session_id");\n    RETURN NEW;\n  END IF;\n  FOR attempt IN 1..2 LOOP\n    IF TG_OP = \'UPDATE\' THEN\n      UPDATE "telemetry_turn_hot" SET ("id", "turn", "calls", "context_tokens", "uncached_input", "cache_read", "cache_write_5m", "cache_write_1h", "output", "reasoning_output", "cache_reported_calls", "cache_read_reported", "cache_denominator", "cost_uncached_input", "cost_cache_read", "cost_cache_write_5m", "cost_cache_write_1h", "cost_output", "cost_usd", "no_cache_cost_usd", "unpriced_calls", "first_at", "last_at", "model", "last_call", "last_call_context_tokens", "last_call_output", "last_call_reasoning_output", "last_call_appended_chars", "last_call_window_tokens", "surface_version", "session_id") = (NEW."id", NEW."turn", NEW."calls", NEW."context_tokens", NEW."uncached_input", NEW."cache_read", NEW."cache_write_5m", NEW."cache_write_1h", NEW."output", NEW."reasoning_output", NEW."cache_reported_calls", NEW."cache_read_reported", NEW."cache_denominator", NEW."cost_uncached_input", NEW."cost_cache_read", NEW."cost_cache_write_5m", NEW."cost_cache_write_1h", NEW."cost_output", NEW."cost_usd", NEW."no_cache_cost_usd", NEW."unpriced_calls", NEW."first_at", NEW."last_at", NEW."model", NEW."last_call", NEW."last_call_context_tokens", NEW."last_call_output", NEW."last_call_reasoning_output", NEW."last_call_appended_chars", NEW."last_call_window_tokens", NEW."surface_version", NEW."session_id") WHERE id = OLD.id;\n    ELSE\n      DELETE FROM "telemetry_turn_hot" WHERE id = OLD.id;\n    END IF;\n    IF FOUND THEN\n      RETURN CASE WHEN TG_OP = \'UPDATE\' THEN NEW ELSE OLD END;\n    END IF;\n    UPDATE "telemetry_agentsession" SET packed = false WHERE id = OLD."session_id" AND packed;\n  END LOOP;\n  RETURN NULL;\nEND $$',
    'CREATE TRIGGER "telemetry_turn_write" INSTEAD OF INSERT OR UPDATE OR DELETE ON "telemetry_turn" FOR EACH ROW EXECUTE FUNCTION "telemetry_turn_write"()',
    'CREATE INDEX "telemetry_turn_packed_expires" ON "telemetry_turn_packed" ("profile_id", expires_at, "session_id") WHERE expires_at IS NOT NULL',
    'CREATE FUNCTION telemetry_unpack_session() RETURNS trigger LANGUAGE plpgsql AS $$\nDECLARE sid bigint := OLD.id;\nBEGIN\n  WITH gone AS (DELETE FROM "telemetry_llmcall_packed" WHERE "session_id" = sid RETURNING stored) INSERT INTO "telemetry_llmcall_hot" SELECT u.* FROM gone CROSS JOIN LATERAL unnest(gone.stored) AS u;\n  WITH gone AS (DELETE FROM "telemetry_turn_packed" WHERE "session_id" = sid RETURNING stored) INSERT INTO "telemetry_turn_hot" SELECT u.* FROM gone CROSS JOIN LATERAL unnest(gone.stored) AS u;\n  RETURN NEW;\nEND $$',
    'CREATE FUNCTION telemetry_truncate_stored() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n  TRUNCATE "telemetry_llmcall_hot", "telemetry_llmcall_packed", "telemetry_turn_hot", "telemetry_turn_packed";\n  RETURN NULL;\nEND $$',
    'CREATE TRIGGER telemetry_truncate_stored BEFORE TRUNCATE ON "telemetry_agentsession" FOR EACH STATEMENT EXECUTE FUNCTION telemetry_truncate_stored()',
    'CREATE INDEX telemetry_session_unpacked ON "telemetry_agentsession" (last_seen_at) WHERE NOT packed',
    'CREATE TRIGGER telemetry_unpack_session BEFORE UPDATE OF packed ON "telemetry_agentsession" FOR EACH ROW WHEN (OLD.packed AND NOT NEW.packed) EXECUTE FUNCTION telemetry_unpack_session()',
    'CREATE FUNCTION telemetry_pack_sessions(ids bigint[]) RETURNS void\nLANGUAGE plpgsql AS $$\nBEGIN\n  -- a session packed already (and written since) is unpacked first: it is packed whole\n  UPDATE "telemetry_agentsession" SET packed = false WHERE id = ANY(ids) AND packed;\n  WITH gone AS (DELETE FROM "telemetry_llmcall_hot" AS h WHERE h."session_id" = ANY(ids) RETURNING h) INSERT INTO "telemetry_llmcall_packed" ("session_id", chunk, stored) SELECT r.sid, (r.n - 1) / 100, array_agg(r.h ORDER BY r.n) FROM (SELECT g.h, (g.h)."session_id" AS sid, row_number() OVER (PARTITION BY (g.h)."session_id" ORDER BY (g.h)."turn", (g.h)."call") AS n FROM gone AS g) AS r GROUP BY r.sid, (r.n - 1) / 100;\n  WITH gone AS (DELETE FROM "telemetry_turn_hot" AS h WHERE h."session_id" = ANY(ids) RETURNING h) INSERT INTO "telemetry_turn_packed" ("session_id", chunk, stored, "profile_id", expires_at) SELECT r.sid, (r.n - 1) / 100, array_agg(r.h ORDER BY r.n), min(r.scope), min((r.h)."last_at") FILTER (WHERE (r.h)."turn" IS DISTINCT FROM r.latest) FROM (SELECT g.h, (g.h)."session_id" AS sid, s."last_turn" AS latest, s."profile_id" AS scope, row_number() OVER (PARTITION BY (g.h)."session_id" ORDER BY (g.h)."turn") AS n FROM gone AS g JOIN "telemetry_agentsession" AS s ON s.id = (g.h)."session_id") AS r GROUP BY r.sid, (r.n - 1) / 100;\n  UPDATE "telemetry_agentsession" SET packed = true WHERE id = ANY(ids);\nEND $$',
]

UNINSTALL = [
    'UPDATE "telemetry_agentsession" SET packed = false WHERE packed',
    "DROP FUNCTION telemetry_pack_sessions(bigint[])",
    'DROP TRIGGER telemetry_unpack_session ON "telemetry_agentsession"',
    "DROP FUNCTION telemetry_unpack_session()",
    'DROP TRIGGER telemetry_truncate_stored ON "telemetry_agentsession"',
    "DROP FUNCTION telemetry_truncate_stored()",
    "DROP INDEX telemetry_session_unpacked",
    'ALTER TABLE "telemetry_agentsession" DROP COLUMN packed',
    'DROP VIEW "telemetry_llmcall"',
    'DROP FUNCTION "telemetry_llmcall_write"()',
    'DROP TABLE "telemetry_llmcall_packed"',
    'ALTER TABLE "telemetry_llmcall_hot" RENAME TO "telemetry_llmcall"',
    'DROP VIEW "telemetry_turn"',
    'DROP FUNCTION "telemetry_turn_write"()',
    'DROP TABLE "telemetry_turn_packed"',
    'ALTER TABLE "telemetry_turn_hot" RENAME TO "telemetry_turn"',
]


def _run(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0034_turn_key_session_unconstrained"),
    ]

    operations = [
        migrations.AlterField(
            model_name="contextevent",
            name="call",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="context_events",
                to="telemetry.llmcall",
            ),
        ),
        migrations.RunPython(_run(INSTALL), _run(UNINSTALL)),
    ]
