"""Ingest: the one write path of usage records, and the raw SQL it stores them with.

- `pipeline`        the entry points (`ingest_records`, `store_records`): orchestration only
- `writers`         the three writers (`portable`, `pg_batch`, `pg_single`) and `choose`
- `known_sessions`  the remembered sessions: a single record in one statement for a session
                    this process wrote last (`writers.pg_single`)
- `statements`      how ingest's statements run on PostgreSQL (prepared, pipelined, together)
- `pg_prepared`     the libpq-level runner of those prepared statements
- `values`          values on their way into a statement, rows back into model instances
- `new_rows`        new rows in one statement (COPY, a few-row INSERT)
- `upserts`         rows written or locked by key in one statement
- `latest_rows`     a partition's latest row with totals over all its rows
- `call_keys`       the stored calls' idempotency keys; a single record's read-insert-derive
- `turn_derivation` turns derived by the database from their stored calls

Nothing is re-exported here: the storage modules are also used by `telemetry.session_state`,
`telemetry.rollups`, `telemetry.derivation` and others that the pipeline itself imports, so
importing the pipeline from this package's `__init__` would make those imports circular.
"""
