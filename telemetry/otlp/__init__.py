"""The OpenTelemetry on-ramp: OTLP/HTTP traces (GenAI spans) and logs (Claude Code events).

`wire` decodes and encodes OTLP, `mapping` turns spans and log records into call drafts and
context events (pure), `store` numbers turns and calls and hands the records to the one ingest
path, `views` is the thin HTTP layer.
"""
