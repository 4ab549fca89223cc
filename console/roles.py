"""Who may do what in the console: three roles as Django groups, checked on the server.

Viewers read; operators may also compact; admins may also edit policy, profiles, model prices
and agent keys. A superuser is an admin. A signed-in user in no group has no role and sees
nothing (403): access is granted, never assumed.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from functools import update_wrapper
from typing import Any, Concatenate, ParamSpec, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, PermissionsMixin
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.template.response import TemplateResponse
from django_htmx.http import HttpResponseClientRedirect

P = ParamSpec("P")
R = TypeVar("R", bound=HttpRequest)
# what the view answers: a page, or a streamed download (console.list_exports)
V = TypeVar("V", bound=HttpResponseBase)


class Role(IntEnum):
    """Ordered: each role may do everything the roles below it may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def group(self) -> str:
        return self.name.lower()


GROUP_NAMES: tuple[str, ...] = tuple(role.group for role in Role)

_CACHE_ATTR = "_console_role"


def role_of(user: AbstractBaseUser | AnonymousUser) -> Role | None:
    """The highest role of `user` (None when anonymous, inactive or in no role group).

    Cached on the user object: a page asks several times, the database once.
    """
    if not user.is_authenticated or not user.is_active:
        return None
    if hasattr(user, _CACHE_ATTR):
        cached: Role | None = getattr(user, _CACHE_ATTR)
        return cached
    role: Role | None = None
    if isinstance(user, PermissionsMixin):
        if user.is_superuser:
            role = Role.ADMIN
        else:
            names = set(user.groups.values_list("name", flat=True))
            held = [r for r in Role if r.group in names]
            role = max(held) if held else None
    setattr(user, _CACHE_ATTR, role)
    return role


def forbidden(request: HttpRequest, needed: Role) -> HttpResponse:
    return TemplateResponse(
        request,
        "console/forbidden.html",
        {"needed": needed.group},
        status=403,
    )


def require_role(
    minimum: Role,
) -> Callable[
    [Callable[Concatenate[R, P], V]],
    Callable[Concatenate[R, P], V | HttpResponse],
]:
    """Anonymous → the login page (an htmx request is told to move the page there); signed in
    without `minimum` → 403; else the view runs."""

    def decorator(
        view: Callable[Concatenate[R, P], V],
    ) -> Callable[Concatenate[R, P], V | HttpResponse]:
        def wrapped(request: R, /, *args: P.args, **kwargs: P.kwargs) -> V | HttpResponse:
            if not request.user.is_authenticated:
                to_login = redirect_to_login(request.get_full_path())
                if getattr(request, "htmx", False):
                    # A poll after the sign-in expired: move the whole page to the login form
                    # instead of swapping the form into a table cell.
                    return HttpResponseClientRedirect(to_login["Location"])
                return to_login
            role = role_of(request.user)
            if role is None or role < minimum:
                return forbidden(request, minimum)
            return view(request, *args, **kwargs)

        update_wrapper(wrapped, view)
        return wrapped

    return decorator


def role_context(request: HttpRequest) -> dict[str, Any]:
    """Template context: the user's role and what it allows (to show or hide controls only;
    every view and action checks again on the server)."""
    role = role_of(request.user) if hasattr(request, "user") else None
    return {
        "console_role": role.group if role else None,
        "can_operate": role is not None and role >= Role.OPERATOR,
        "can_admin": role is not None and role >= Role.ADMIN,
    }
