"""A call's payload hash as the SHA-256's 32 raw bytes (bytea), not its 64 hex characters.

65 bytes a row as text, 33 as bytea (`telemetry.digests`). PostgreSQL converts the column in
place (`decode(…, 'hex')`, one rewrite of the calls table under its lock); SQLite stores any
value in any column, so its rows are rewritten in batches of `BATCH` (the declared type stays
until a later change remakes the table). Reversible: the reverse writes the hex back.

The rule is frozen here (a migration never imports the live code, which may change after it);
tests/db/test_migrations.py proves it equal to `telemetry.digests` on boundary examples.
"""

from typing import Any

from django.db import migrations, models

BATCH = 5_000
TABLE = "telemetry_llmcall"


def stored_from_hex(text: str) -> bytes:
    """Frozen `telemetry.digests.digest_from_text`: 64 hex digits, their 32 bytes."""
    value = bytes.fromhex(text)
    if len(value) != 32:
        raise ValueError("a payload hash is 64 hex digits")
    return value


def hex_from_stored(stored: bytes | memoryview) -> str:
    """Frozen `telemetry.digests.digest_text`: the 32 bytes in lowercase hex."""
    return bytes(stored).hex()


def _rewrite(schema_editor: Any, convert: Any) -> None:
    """Every row's payload hash through `convert`, `BATCH` rows a statement (SQLite)."""
    last = 0
    with schema_editor.connection.cursor() as cursor:
        while True:
            cursor.execute(
                f"SELECT id, payload_hash FROM {TABLE} WHERE id > %s ORDER BY id LIMIT %s",
                [last, BATCH],
            )
            rows = cursor.fetchall()
            if not rows:
                return
            last = rows[-1][0]
            cursor.executemany(
                f"UPDATE {TABLE} SET payload_hash = %s WHERE id = %s",
                [(convert(digest), pk) for pk, digest in rows],
            )


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} ALTER COLUMN payload_hash TYPE bytea "
            "USING decode(payload_hash, 'hex')"
        )
    else:
        _rewrite(schema_editor, lambda d: d if isinstance(d, bytes) else stored_from_hex(d))


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} ALTER COLUMN payload_hash TYPE varchar(64) "
            "USING encode(payload_hash, 'hex')"
        )
    else:
        _rewrite(schema_editor, lambda d: d if isinstance(d, str) else hex_from_stored(d))


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0028_turn_last_at_brin"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="llmcall",
                    name="payload_hash",
                    field=models.BinaryField(max_length=32),
                ),
            ],
            database_operations=[migrations.RunPython(forward, backward, elidable=False)],
        ),
    ]
