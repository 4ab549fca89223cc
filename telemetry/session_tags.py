"""Operator tags on sessions: the one write path, and the reads the list and the API share.

Each change locks the session row first, so two operators adding at once cannot pass
`MAX_TAGS_PER_SESSION` between them; the unique (session, tag) constraint backs "once per
session". Tags are created and deleted one row at a time so django-auditlog records each (who,
when, which tag), as it does for policies and keys.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from telemetry.models import AgentSession, SessionTag
from telemetry.tag_rules import TagError, normalise, parse_tags, tags_after_adding


def _held(session_id: int) -> dict[str, SessionTag]:
    return {row.tag: row for row in SessionTag.objects.filter(session_id=session_id)}


def _locked(session_id: int) -> None:
    AgentSession.objects.select_for_update().filter(pk=session_id).values_list("pk").first()


def add_tags(*, session_id: int, texts: Iterable[str]) -> tuple[str, ...]:
    """Add the tags `texts` name (`parse_tags`) to the session; the session's tags after.
    Adding a tag it holds changes nothing. Raises `TagError` (nothing added) on a bad tag or
    when the session would hold more than `MAX_TAGS_PER_SESSION`."""
    return _add(session_id, parse_tags(texts))


def _add(session_id: int, added: tuple[str, ...]) -> tuple[str, ...]:
    with transaction.atomic():
        _locked(session_id)
        held = _held(session_id)
        after = tags_after_adding(held, added)
        for tag in added:
            if tag not in held:
                SessionTag.objects.create(session_id=session_id, tag=tag)
    return after


def add_tags_to_many(*, session_ids: Iterable[int], texts: Iterable[str]) -> list[int]:
    """Add the tags `texts` name to each session; the sessions left as they were because they
    would pass `MAX_TAGS_PER_SESSION`. A bad tag raises `TagError` before any session changes."""
    added = parse_tags(texts)
    full = []
    for session_id in session_ids:
        try:
            _add(session_id, added)
        except TagError:
            full.append(session_id)
    return full


def remove_tag(*, session_id: int, tag: str) -> tuple[str, ...]:
    """Remove `tag` (normalised as typed) from the session; the session's tags after. Removing
    a tag it does not hold changes nothing."""
    with transaction.atomic():
        _locked(session_id)
        held = _held(session_id)
        row = held.pop(normalise(tag), None)
        if row is not None:
            row.delete()
    return tuple(sorted(held))


def set_tags(*, session_id: int, texts: Iterable[str]) -> tuple[str, ...]:
    """Make the session's tags exactly those `texts` name; the session's tags after. Raises
    `TagError` (nothing changed) on a bad tag or too many."""
    wanted = tags_after_adding((), parse_tags(texts))
    with transaction.atomic():
        _locked(session_id)
        held = _held(session_id)
        for tag, row in held.items():
            if tag not in wanted:
                row.delete()
        for tag in wanted:
            if tag not in held:
                SessionTag.objects.create(session_id=session_id, tag=tag)
    return wanted


def tags_of(session_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """Each session's tags, sorted (sessions without one are absent). One query."""
    found: dict[int, list[str]] = {}
    rows = SessionTag.objects.filter(session_id__in=list(session_ids)).order_by("tag")
    for session_id, tag in rows.values_list("session_id", "tag"):
        found.setdefault(session_id, []).append(tag)
    return {pk: tuple(tags) for pk, tags in found.items()}


def known_tags(limit: int = 200) -> list[str]:
    """The first `limit` distinct tags some session holds, sorted (the filter's choices). Reads
    the (tag, session) index."""
    return list(SessionTag.objects.order_by("tag").values_list("tag", flat=True).distinct()[:limit])
