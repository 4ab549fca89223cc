"""The fleet bench's bytes report: per million calls, each table's parts adding up to its total."""

from __future__ import annotations

from bench.storage import TableBytes, report, table_lines

MIB = 2**20


def test_bytes_are_scaled_to_a_million_calls_and_add_up():
    calls = TableBytes("telemetry_llmcall", 500_000, 100 * MIB, 2 * MIB, {"a": 10 * MIB, "b": MIB})
    turns = TableBytes("telemetry_turn", 0, 0, 0, {})
    summary = report([calls, turns], calls=500_000, database_bytes=150 * MIB)
    table = summary["tables"]["telemetry_llmcall"]
    assert table["heap"] == 200.0 and table["toast"] == 4.0
    assert table["indexes"] == {"a": 20.0, "b": 2.0}
    assert table["mib_per_million_calls"] == 226.0 == calls.total * 2 / MIB
    assert table["bytes_per_row"] == round(100 * MIB / 500_000, 1)
    assert summary["tables"]["telemetry_turn"]["bytes_per_row"] is None  # no rows, no ratio
    assert summary["tables_mib_per_million_calls"] == 226.0
    assert summary["database_mib_per_million_calls"] == 300.0
    lines = table_lines(summary)
    assert lines[0].startswith("MiB per million calls, 500,000 calls: database 300.0")
    assert "      a: 20.0" in lines


def test_a_packed_models_hot_and_packed_tables_add_up_under_its_name():
    hot = TableBytes("telemetry_llmcall_hot", 10, MIB, 0, {"call_unique_position": MIB})
    packed = TableBytes("telemetry_llmcall_packed", 5, MIB, 3 * MIB, {"pkey": MIB})
    summary = report([hot, packed], calls=1_000_000, database_bytes=10 * MIB)
    calls = summary["tables"]["telemetry_llmcall"]
    assert calls["parts"] == ["telemetry_llmcall_hot", "telemetry_llmcall_packed"]
    assert calls["mib_per_million_calls"] == 2.0 + 5.0
    assert summary["tables_mib_per_million_calls"] == 7.0  # the sum counts each part once
    assert "  telemetry_llmcall (telemetry_llmcall_hot + telemetry_llmcall_packed): 7.0" in (
        table_lines(summary)
    )
    assert "telemetry_turn" not in summary["tables"]  # no parts measured, no sum
