"""Index each chunk's readable text instead of its raw JSON.

The raw JSON tokenised badly ("\\nStep" became "nstep", "\\u00e9" never matched "é"). Chunks get
a `search` column with the decoded strings of the message; the PostgreSQL index and the SQLite
FTS5 table move to it, and existing archives are filled in.
"""

import json

from django.db import migrations, models

PG = [
    "DROP INDEX IF EXISTS compaction_archivechunk_fts",
    "CREATE INDEX compaction_archivechunk_fts ON compaction_archivechunk "
    "USING GIN (to_tsvector('english', search))",
]
SQLITE = [
    "DROP TRIGGER IF EXISTS compaction_archivechunk_ad",
    "DROP TRIGGER IF EXISTS compaction_archivechunk_ai",
    "DROP TABLE IF EXISTS compaction_archivechunk_fts",
    "CREATE VIRTUAL TABLE compaction_archivechunk_fts USING fts5("
    "search, content='compaction_archivechunk', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER compaction_archivechunk_ai AFTER INSERT ON compaction_archivechunk BEGIN "
    "INSERT INTO compaction_archivechunk_fts(rowid, search) VALUES (new.id, new.search); END",
    "CREATE TRIGGER compaction_archivechunk_ad AFTER DELETE ON compaction_archivechunk BEGIN "
    "INSERT INTO compaction_archivechunk_fts(compaction_archivechunk_fts, rowid, search) "
    "VALUES ('delete', old.id, old.search); END",
    "CREATE TRIGGER compaction_archivechunk_au AFTER UPDATE ON compaction_archivechunk BEGIN "
    "INSERT INTO compaction_archivechunk_fts(compaction_archivechunk_fts, rowid, search) "
    "VALUES ('delete', old.id, old.search); "
    "INSERT INTO compaction_archivechunk_fts(rowid, search) VALUES (new.id, new.search); END",
]
STRUCTURE = {
    "seq",
    "type",
    "role",
    "id",
    "tool_use_id",
    "tool_call_id",
    "signature",
    "cache_control",
}
CHUNK = 64 * 1024 // 4


def _readable(raw):
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    out = []

    def walk(node):
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, dict):
            for key, item in node.items():
                if key not in STRUCTURE:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(value)
    return "\n".join(out).replace("\x00", "\ufffd")


def forward(apps, schema_editor):
    statements = PG if schema_editor.connection.vendor == "postgresql" else SQLITE
    for statement in statements:
        schema_editor.execute(statement)
    Chunk = apps.get_model("compaction", "ArchiveChunk")
    messages = {}
    for chunk in Chunk.objects.order_by("archive_id", "seq", "part"):
        messages.setdefault((chunk.archive_id, chunk.seq), []).append(chunk)
    for chunks in messages.values():
        text = _readable("".join(c.text for c in chunks))
        parts = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)] or [""]
        for index, chunk in enumerate(chunks):
            chunk.search = parts[index] if index < len(parts) else ""
            chunk.save(update_fields=["search"])
        for index in range(len(chunks), len(parts)):
            Chunk.objects.create(
                archive_id=chunks[0].archive_id,
                seq=chunks[0].seq,
                part=index,
                role=chunks[0].role,
                text="",
                search=parts[index],
            )
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            "INSERT INTO compaction_archivechunk_fts(compaction_archivechunk_fts) VALUES ('rebuild')"
        )


class Migration(migrations.Migration):
    dependencies = [("compaction", "0002_archive_search")]
    operations = [
        migrations.AddField(
            model_name="archivechunk", name="search", field=models.TextField(default="")
        ),
        migrations.RunPython(forward, migrations.RunPython.noop),
    ]
