"""Index identifiers by their parts: each chunk's `search` text gains the parts and glued runs of
its compound identifiers (`compaction.search_terms`), so `Registry` finds
`Acme.Billing.InvoiceRegistry` on PostgreSQL (which read the dotted name as one host token)
and on SQLite (whose unicode61 tokenizer never splits camelCase).

The GIN expression index and the FTS5 table already read `search`; SQLite's update trigger
re-indexes each row this rewrites.
"""

from django.db import migrations

SEPARATOR = "\n\x1f\n"


def forward(apps, schema_editor):
    # The term extraction is the live module's: a later change to it would re-index new
    # archives only, and old rows keep what this wrote, which stays searchable by their parts.
    from compaction.search_terms import searchable

    Chunk = apps.get_model("compaction", "ArchiveChunk")
    batch = []
    for chunk in Chunk.objects.only("id", "search").iterator(chunk_size=500):
        if SEPARATOR in chunk.search:
            continue
        updated = searchable(chunk.search)
        if updated != chunk.search:
            chunk.search = updated
            batch.append(chunk)
        if len(batch) >= 500:
            Chunk.objects.bulk_update(batch, ["search"])
            batch = []
    if batch:
        Chunk.objects.bulk_update(batch, ["search"])


def backward(apps, schema_editor):
    Chunk = apps.get_model("compaction", "ArchiveChunk")
    for chunk in Chunk.objects.filter(search__contains=SEPARATOR).iterator(chunk_size=500):
        chunk.search = chunk.search.split(SEPARATOR, 1)[0]
        chunk.save(update_fields=["search"])


class Migration(migrations.Migration):
    dependencies = [("compaction", "0003_archive_search_text")]
    operations = [migrations.RunPython(forward, backward)]
