"""`python manage.py create_agent_key --profile NAME [--scope compact]`.

Creates the profile if needed and prints the new key as the last line of output.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from telemetry.errors import FieldError
from telemetry.keys import create_agent_key


class Command(BaseCommand):
    help = "Create an agent API key bound to a profile; prints the key (shown only once) last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--profile", required=True, help="agent profile name (created if new)")
        parser.add_argument(
            "--scope",
            action="append",
            default=[],
            choices=["ingest", "compact"],
            help="extra scope; 'ingest' is always granted. Repeatable.",
        )
        parser.add_argument("--name", default="", help="a label to recognise the key by")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = create_agent_key(
                profile_name=options["profile"], scopes=options["scope"], name=options["name"]
            )
        except FieldError as exc:
            raise CommandError(str(exc)) from None
        key = issued.key
        self.stdout.write(
            f"Created key {key.prefix} for profile '{key.profile.name}' "
            f"with scopes {', '.join(key.scopes)}. Store it now; it is not shown again:"
        )
        self.stdout.write(issued.plaintext)
