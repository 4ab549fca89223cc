"""What a row change must tell this process's caches (`telemetry.policy_store`, `telemetry.catalogue`).

Saving or deleting a Policy or CatalogueModel row forgets the remembered reads at once, and again
when the transaction commits (a read between the save and the commit may have remembered the
uncommitted row, or one the rollback undoes). Other processes see the change within their cache's
age limit (one second). Queryset `.update()` sends no signal: only that age limit covers it.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save

from telemetry.catalogue import forget_catalogue
from telemetry.models import CatalogueModel, Policy
from telemetry.policy_store import forget_policies


def _policy_changed(**_: Any) -> None:
    forget_policies()
    transaction.on_commit(forget_policies)


def _catalogue_changed(**_: Any) -> None:
    forget_catalogue()
    transaction.on_commit(forget_catalogue)


def connect_cache_invalidation() -> None:
    for signal in (post_save, post_delete):
        signal.connect(_policy_changed, sender=Policy, dispatch_uid="telemetry-policy-cache")
        signal.connect(
            _catalogue_changed, sender=CatalogueModel, dispatch_uid="telemetry-catalogue-cache"
        )
