"""The seam between the ingest pipeline and storage: three writers, one chosen per submission.

| writer      | chosen when                              | what it sends                                   |
|-------------|------------------------------------------|-------------------------------------------------|
| `portable`  | any database but PostgreSQL              | the ORM: model instances, turns derived in Python |
| `pg_batch`  | PostgreSQL, two records or more          | one COPY of the new calls; turns derived in SQL  |
| `pg_single` | PostgreSQL, one record                   | one statement when the session is remembered,    |
|             |                                          | else read-insert-derive beside the session lock  |

Each is a module with one function, `store(submission) -> Written` (`telemetry.ingest.writers.
steps` holds both types and the steps they share), held to store what `portable` stores by a
named test (tests/db/test_writers_equal.py). `choose` is the only place that asks which
database this is; docs/performance.md has the table with each writer's bench figure.
"""

from __future__ import annotations

from telemetry.ingest import statements
from telemetry.ingest.writers import pg_batch, pg_single, portable
from telemetry.ingest.writers.steps import Submission, Writer, Written

__all__ = ["Submission", "Writer", "Written", "choose"]


def choose(records: int) -> Writer:
    """The writer of a submission of `records` valid records on this process's database."""
    if not statements.set_wise():
        return portable.store
    return pg_single.store if records == 1 else pg_batch.store
