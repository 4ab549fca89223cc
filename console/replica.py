"""Which reads may go to the read replica (`DATABASE_REPLICA_URL`, `console.routers`).

Only the pages wrapped in `reads_from_replica` (in `console.urls`), only on GET and HEAD, and
only outside a transaction: a read the request then bases a write on, a page shown right after
its own write (a session after a compaction, a policy after saving it), the agents' API and
everything else read the primary. The signed-in user and the session are read from the
primary before the page runs, so a sign-in is never lost to replication lag.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import wraps
from typing import Concatenate, ParamSpec, TypeVar

from django.http import HttpRequest, HttpResponse

P = ParamSpec("P")
R = TypeVar("R", bound=HttpRequest)

_REPLICA_READS: ContextVar[bool] = ContextVar("replica_reads", default=False)

SAFE_METHODS = frozenset({"GET", "HEAD"})


def replica_reads_allowed() -> bool:
    """Whether the running code is a page that may read from the replica."""
    return _REPLICA_READS.get()


def reads_from_replica(
    view: Callable[Concatenate[R, P], HttpResponse],
) -> Callable[Concatenate[R, P], HttpResponse]:
    """Let `view`'s reads go to the replica (when one is configured) on GET and HEAD."""

    @wraps(view)
    def wrapped(request: R, /, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        if request.method not in SAFE_METHODS:
            return view(request, *args, **kwargs)
        _ = request.user.is_authenticated  # the session and the user: from the primary
        token = _REPLICA_READS.set(True)
        try:
            return view(request, *args, **kwargs)
        finally:
            _REPLICA_READS.reset(token)

    return wrapped
