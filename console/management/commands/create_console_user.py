"""`python manage.py create_console_user NAME --role viewer|operator|admin`: a console login.

Roles are Django groups (`console.roles`): viewers read; operators may also compact; admins may
also edit policy, profiles, model prices and agent keys. Run again for an existing user to
change the role (the password stays unless one is given).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from console.roles import GROUP_NAMES


class Command(BaseCommand):
    help = "Create a console user with a role (viewer, operator or admin), or change a user's role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=GROUP_NAMES)
        parser.add_argument(
            "--password",
            default=os.environ.get("CONSOLE_USER_PASSWORD", ""),
            help="the password (default: CONSOLE_USER_PASSWORD, else a generated one, printed)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"].strip()
        if not username:
            raise CommandError("username: must not be blank")
        role: str = options["role"]
        password: str = options["password"]
        users = get_user_model()
        with transaction.atomic():
            user, created = users.objects.get_or_create(username=username)
            generated = ""
            if password or created:
                generated = "" if password else secrets.token_urlsafe(12)
                user.set_password(password or generated)
                user.save()
            # one role: the groups of the other roles are taken away
            user.groups.remove(*Group.objects.filter(name__in=GROUP_NAMES).exclude(name=role))
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        verb = "Created" if created else "Updated"
        line = f"{verb} {username} with the {role} role"
        if generated:
            line += f"; password {generated}"
        self.stdout.write(line)
