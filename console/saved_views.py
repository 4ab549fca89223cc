"""Saved views of the sessions list: the one write path (per user; `console.view_rules` says
what a name and a query may be).

Saving under a name the user already has replaces that view's query (a repeated submission
changes nothing). Every change names its user: a view of another user is "no such view" (404),
never shown, renamed or deleted.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from console.models import SavedView
from console.view_rules import MAX_VIEWS_PER_USER, saved_query, view_name
from telemetry.errors import FieldError


def views_of(user: AbstractBaseUser) -> list[SavedView]:
    """The user's saved views, by name."""
    return list(SavedView.objects.filter(user_id=user.pk).order_by("name", "pk"))


def save_view(*, user: AbstractBaseUser, name: str, pairs: Iterable[tuple[str, str]]) -> SavedView:
    """Save the list's query `pairs` as the user's view `name` (replacing the query of a view
    of that name). Raises `FieldError` on `name` or `query`, and on `name` past
    `MAX_VIEWS_PER_USER` views."""
    clean_name = view_name(name)
    query = saved_query(pairs)
    with transaction.atomic():
        held = SavedView.objects.select_for_update().filter(user_id=user.pk, name=clean_name)
        view = held.first()
        if view is not None:
            if view.query != query:
                view.query = query
                view.save(update_fields=["query"])
            return view
        if SavedView.objects.filter(user_id=user.pk).count() >= MAX_VIEWS_PER_USER:
            raise FieldError("name", f"you have {MAX_VIEWS_PER_USER} saved views: delete one first")
        try:
            with transaction.atomic():
                return SavedView.objects.create(user_id=user.pk, name=clean_name, query=query)
        except IntegrityError:
            # the same name saved at the same moment (a double click): the first one stands
            return SavedView.objects.get(user_id=user.pk, name=clean_name)


def _own(user: AbstractBaseUser, view_id: int) -> SavedView:
    view = SavedView.objects.filter(user_id=user.pk, pk=view_id).first()
    if view is None:
        raise FieldError("view", "no such view", status=404)
    return view


def rename_view(*, user: AbstractBaseUser, view_id: int, name: str) -> SavedView:
    """Rename the user's view. Raises `FieldError`: `view` 404 when it is not theirs, `name`
    409 when another of their views has that name."""
    clean_name = view_name(name)
    view = _own(user, view_id)
    if view.name == clean_name:
        return view
    if SavedView.objects.filter(user_id=user.pk, name=clean_name).exclude(pk=view.pk).exists():
        raise FieldError("name", f"you already have a view named {clean_name!r}", status=409)
    view.name = clean_name
    try:
        with transaction.atomic():
            view.save(update_fields=["name"])
    except IntegrityError:
        raise FieldError(
            "name", f"you already have a view named {clean_name!r}", status=409
        ) from None
    return view


def delete_view(*, user: AbstractBaseUser, view_id: int) -> None:
    """Delete the user's view; deleting one that is gone (or never was theirs) changes nothing."""
    SavedView.objects.filter(user_id=user.pk, pk=view_id).delete()
