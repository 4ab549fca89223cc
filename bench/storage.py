"""Where the bytes go: the size of each table the calls make, split into its heap, its TOAST and
each of its indexes, per million calls (`make bench BENCH_SCALE=fleet`, and `--only storage`
for the seed and this report alone, at any `--fleet-sessions`).

Bytes per call are nearly the same at any scale: a table's rows and index entries grow with the
calls, and what does not (a table's first pages, the catalogue, the policy rows) is a few
hundred kilobytes in all. The report counts the whole database too, so the per-table sum and
`pg_database_size` can be compared; the docs quote the measured figures at two scales.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The tables that grow with the calls (the rest are a few pages whatever the fleet).
# Calls and turns are each a hot table and a packed one under a view (`telemetry.packing`);
# `LOGICAL` sums them back into the view's name.
TABLES = (
    "telemetry_llmcall_hot",
    "telemetry_llmcall_packed",
    "telemetry_turn_hot",
    "telemetry_turn_packed",
    "telemetry_agentsession",
    "telemetry_hourlyusage",
    "telemetry_turnkey",
    "telemetry_contextevent",
)


LOGICAL = {
    "telemetry_llmcall": ("telemetry_llmcall_hot", "telemetry_llmcall_packed"),
    "telemetry_turn": ("telemetry_turn_hot", "telemetry_turn_packed"),
}


@dataclass(frozen=True)
class TableBytes:
    table: str
    rows: int
    heap: int
    toast: int
    indexes: dict[str, int]

    @property
    def total(self) -> int:
        return self.heap + self.toast + sum(self.indexes.values())


def measure(cursor: Any) -> list[TableBytes]:
    """Each table of `TABLES`: its heap (main fork, free-space and visibility maps included),
    its TOAST table with its index, and each index, in bytes, read after a VACUUM."""
    found = []
    for table in TABLES:
        cursor.execute(
            "SELECT c.reltuples::bigint, pg_relation_size(c.oid, 'main') "
            "+ pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm'), "
            "COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) "
            "FROM pg_class c WHERE c.oid = %s::regclass",
            [table],
        )
        rows, heap, toast = cursor.fetchone()
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_total_relation_size(i.indexrelid) "
            "FROM pg_index i WHERE i.indrelid = %s::regclass ORDER BY 1",
            [table],
        )
        indexes = {name: int(size) for name, size in cursor.fetchall()}
        found.append(TableBytes(table, max(int(rows), 0), int(heap), int(toast), indexes))
    return found


def report(found: list[TableBytes], calls: int, database_bytes: int) -> dict[str, Any]:
    """Bytes per million calls: the whole database, each table's parts and each index."""
    per = 1_000_000 / max(calls, 1)
    tables: dict[str, dict[str, Any]] = {}
    for t in found:
        tables[t.table] = {
            "rows": t.rows,
            "bytes_per_row": round(t.heap / t.rows, 1) if t.rows else None,
            "mib_per_million_calls": round(t.total * per / 2**20, 1),
            "heap": round(t.heap * per / 2**20, 1),
            "toast": round(t.toast * per / 2**20, 1),
            "indexes": {name: round(size * per / 2**20, 1) for name, size in t.indexes.items()},
        }
    for name, parts in LOGICAL.items():
        if not all(part in tables for part in parts):
            continue
        tables[name] = {
            "parts": list(parts),
            "mib_per_million_calls": round(
                sum(tables[part]["mib_per_million_calls"] for part in parts), 1
            ),
        }
    return {
        "calls": calls,
        "database_mib_per_million_calls": round(database_bytes * per / 2**20, 1),
        "tables_mib_per_million_calls": round(sum(t.total for t in found) * per / 2**20, 1),
        "tables": tables,
    }


def table_lines(summary: dict[str, Any]) -> list[str]:
    """The report as text lines (MiB per million calls)."""
    lines = [
        f"MiB per million calls, {summary['calls']:,} calls: database "
        f"{summary['database_mib_per_million_calls']}, these tables "
        f"{summary['tables_mib_per_million_calls']}"
    ]
    for table, t in summary["tables"].items():
        if "parts" in t:
            lines.append(f"  {table} ({' + '.join(t['parts'])}): {t['mib_per_million_calls']}")
            continue
        lines.append(
            f"  {table}: {t['mib_per_million_calls']} (heap {t['heap']}, toast {t['toast']}; "
            f"{t['rows']:,} rows, {t['bytes_per_row']} B/row)"
        )
        for name, size in t["indexes"].items():
            lines.append(f"      {name}: {size}")
    return lines
