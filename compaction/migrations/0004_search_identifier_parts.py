"""Index identifiers by their parts: each chunk's `search` text gains the parts and glued runs of
its compound identifiers (`compaction.search_terms`), so `Registry` finds
`Acme.Billing.InvoiceRegistry` on PostgreSQL (which read the dotted name as one host token)
and on SQLite (whose unicode61 tokenizer never splits camelCase).

The GIN expression index and the FTS5 table already read `search`; SQLite's update trigger
re-indexes each row this rewrites.
"""

import re

from django.db import migrations

SEPARATOR = "\n\x1f\n"

# A frozen copy of `compaction.search_terms.searchable` (and what it calls) as it was when this
# migration was written: a later change to the live module re-indexes new archives only, and the
# rows this rewrote keep what it wrote, which stays searchable by their parts.
MAX_COMPOUND = 6
_IDENTIFIER = re.compile(r"[\w.:/\\@#$%+~=?&-]+")
_ALNUM = re.compile(r"[^\W_]+")
_HUMP = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")


def identifier_parts(word):
    parts = []
    for run in _ALNUM.findall(word):
        humps = _HUMP.findall(run) if run.isascii() else [run]
        parts.extend(hump.lower() for hump in (humps or [run]))
    return parts


def index_terms(text):
    seen = {}
    for match in _IDENTIFIER.finditer(text):
        parts = identifier_parts(match.group())
        if len(parts) < 2:
            continue
        for start in range(len(parts)):
            seen.setdefault(parts[start], None)
            for stop in range(start + 2, min(start + MAX_COMPOUND, len(parts)) + 1):
                seen.setdefault("".join(parts[start:stop]), None)
    return " ".join(seen)


def searchable(readable):
    terms = index_terms(readable)
    return readable + SEPARATOR + terms if terms else readable


def forward(apps, schema_editor):
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
