"""Ingest: the one write path of usage records, and the raw SQL it stores them with.

`pipeline` is the entry point (`ingest_records`, `store_records`); the other modules are its
storage: the PostgreSQL statements and how they run, and the single-record shortcut of a
session this process wrote last (`known_sessions`).

Nothing is re-exported here: the storage modules are also used by `telemetry.session_state`,
`telemetry.rollups`, `telemetry.derivation` and others that the pipeline itself imports, so
importing the pipeline from this package's `__init__` would make those imports circular.
"""
