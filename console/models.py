"""The console's own rows: what an operator keeps for themselves."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SavedView(models.Model):
    """A sessions-list query an operator saved under a name, theirs alone (per user: no one
    else lists, applies, renames or deletes it). Written only by `console.saved_views`."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    name = models.CharField(max_length=60)
    # the list's query string as saved (`console.saved_views.saved_query`), without `page`
    query = models.CharField(max_length=2000, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="saved_view_name_per_user"),
        ]

    def __str__(self) -> str:
        return self.name
