"""How one audited change reads: who made it and each field's value before → after.

Pure (no Django): the view hands in what django-auditlog stored (`LogEntry.changes`, the actor's
name and the entry's `additional_data`), so the wording is tested without a database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

HIDDEN: Final = "(hidden)"
NONE_SHOWN: Final = "—"
EMPTY_SHOWN: Final = "(empty)"
# Longer values (a nudge text, a list of tools) are cut for the table; the full value is kept.
SHOWN_CHARS: Final = 200
API_ACTOR_PREFIX: Final = "api:"
SYSTEM_ACTOR: Final = "system"


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: str
    after: str


def shown(value: object) -> str:
    """One stored value as the table shows it: none as a dash, lists and objects as JSON."""
    if value is None or value == "None":
        return NONE_SHOWN
    if value == "":
        return EMPTY_SHOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    else:
        text = str(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def field_changes(changes: Mapping[str, object] | None) -> list[FieldChange]:
    """Each changed field, in name order, but a blank one that stays blank. A field's change is `[before, after]`; a many-to-many
    change (`{"type": "m2m", "operation": "add"|"delete", "objects": [...]}`) reads as the
    objects removed before and added after."""
    rows: list[FieldChange] = []
    for name in sorted(changes or {}):
        value = (changes or {})[name]
        if isinstance(value, Mapping) and value.get("type") == "m2m":
            objects = ", ".join(str(item) for item in value.get("objects") or [])
            added = value.get("operation") == "add"
            rows.append(
                FieldChange(
                    name.replace("_", " "),
                    NONE_SHOWN if added else f"removed {objects}",
                    f"added {objects}" if added else NONE_SHOWN,
                )
            )
        elif isinstance(value, list | tuple) and len(value) == 2:
            before, after = shown(value[0]), shown(value[1])
            if {before, after} <= {NONE_SHOWN, EMPTY_SHOWN}:
                continue  # a blank field of a new row: nothing to read
            rows.append(FieldChange(name.replace("_", " "), before, after))
        else:
            rows.append(FieldChange(name.replace("_", " "), NONE_SHOWN, shown(value)))
    return rows


def api_actor(key_prefix: str) -> str:
    return f"{API_ACTOR_PREFIX}{key_prefix}"


def actor_label(user_name: str | None, additional: object) -> str:
    """Who made a change: the signed-in user, else the agent key of an API request
    ("api:<prefix>"), else the system (a management command, a migration, a task)."""
    if user_name:
        return user_name
    if isinstance(additional, Mapping):
        actor = additional.get("actor")
        if isinstance(actor, str) and actor:
            return actor
    return SYSTEM_ACTOR
