"""Outside a transaction (an API request), the database rate counter commits on its own in one
round trip: counts stay exact and the connection is left in autocommit, also after a failure."""

from __future__ import annotations

import pytest
from django.db import DataError, connection

from telemetry.models import RateCount
from telemetry.ratelimit import RateLimited, check_rate


@pytest.mark.django_db(transaction=True)
def test_counts_commit_on_their_own_and_the_connection_stays_in_autocommit(agent):
    key_id = agent.key.pk
    assert not connection.in_atomic_block
    for _ in range(3):
        check_rate(key_id, limit=3, now=600.0)
    with pytest.raises(RateLimited):
        check_rate(key_id, limit=3, now=601.0)
    assert RateCount.objects.get(key_id=key_id, window=10).count == 4
    assert connection.get_autocommit()
    if connection.vendor == "postgresql":
        from psycopg.pq import TransactionStatus

        assert connection.connection.info.transaction_status == TransactionStatus.IDLE


@pytest.mark.django_db(transaction=True)
def test_a_failed_count_leaves_no_transaction_open(agent):
    if connection.vendor != "postgresql":
        pytest.skip("the one-round-trip commit is PostgreSQL's (SQLite counts in the statement)")
    with pytest.raises(DataError):  # a window past bigint: the counter's INSERT fails
        check_rate(agent.key.pk, limit=10, now=60.0 * 2**64)
    assert not RateCount.objects.filter(key_id=agent.key.pk).exists()  # the connection works
    check_rate(agent.key.pk, limit=10, now=60.0)
    assert RateCount.objects.get(key_id=agent.key.pk, window=1).count == 1
