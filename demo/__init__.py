"""The demo: a deterministic scenario of agent sessions (`demo.scenario`, pure) and the
`manage.py simulate` command that plays it through the real API. Not part of the domain: nothing
in telemetry or compaction imports it."""
