"""Full-text search over archived chunks: a GIN expression index on PostgreSQL, FTS5 on SQLite.

Each chunk is at most 64 KB, far below PostgreSQL's 1 MB tsvector cap.
"""

from django.db import migrations

PG_FORWARD = (
    "CREATE INDEX compaction_archivechunk_fts ON compaction_archivechunk "
    "USING GIN (to_tsvector('english', text))"
)
PG_BACKWARD = "DROP INDEX IF EXISTS compaction_archivechunk_fts"

SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE compaction_archivechunk_fts USING fts5("
    "text, content='compaction_archivechunk', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER compaction_archivechunk_ai AFTER INSERT ON compaction_archivechunk BEGIN "
    "INSERT INTO compaction_archivechunk_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER compaction_archivechunk_ad AFTER DELETE ON compaction_archivechunk BEGIN "
    "INSERT INTO compaction_archivechunk_fts(compaction_archivechunk_fts, rowid, text) "
    "VALUES ('delete', old.id, old.text); END",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS compaction_archivechunk_ad",
    "DROP TRIGGER IF EXISTS compaction_archivechunk_ai",
    "DROP TABLE IF EXISTS compaction_archivechunk_fts",
]


def forward(apps, schema_editor):
    statements = [PG_FORWARD] if schema_editor.connection.vendor == "postgresql" else SQLITE_FORWARD
    for statement in statements:
        schema_editor.execute(statement)


def backward(apps, schema_editor):
    statements = (
        [PG_BACKWARD] if schema_editor.connection.vendor == "postgresql" else SQLITE_BACKWARD
    )
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("compaction", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
