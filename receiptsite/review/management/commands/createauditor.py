"""Make an auditor: a staff user in the Auditors group (migrations give the group exactly what
auditors need), who signs in to the admin and records review decisions."""

from __future__ import annotations

import getpass
import os
from typing import Any

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

GROUP = "Auditors"
PASSWORD_VARIABLE = "DJANGO_AUDITOR_PASSWORD"


class Command(BaseCommand):
    help = (
        "Create the user USERNAME as an auditor (staff, in the Auditors group), asking for "
        f"a password; with --noinput the password is read from {PASSWORD_VARIABLE}. An "
        "existing user is made an auditor and keeps their password."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--noinput", "--no-input", action="store_false", dest="interactive",
            help=f"ask nothing: the password is {PASSWORD_VARIABLE}",
        )

    def handle(
        self, *args: Any, username: str, email: str, interactive: bool = True, **options: Any
    ) -> None:
        group = Group.objects.filter(name=GROUP).first()
        if group is None:
            raise CommandError(f"there is no {GROUP} group: run `python manage.py migrate`")
        try:
            User.username_validator(username)
        except ValidationError as error:
            raise CommandError(f"USERNAME: {' '.join(error.messages)}") from None
        existing = User.objects.filter(username=username).first()
        password = None if existing is not None else self.password(username, interactive)
        with transaction.atomic():
            user = existing or User(username=username, email=email)
            user.is_staff = True
            if password is not None:
                user.set_password(password)
            user.save()
            user.groups.add(group)
        made = "is now an auditor" if existing is not None else "was created as an auditor"
        self.stdout.write(f"{username} {made}: sign in at /admin/.")

    def password(self, username: str, interactive: bool) -> str:
        if not interactive:
            password = os.environ.get(PASSWORD_VARIABLE, "")
            if not password:
                raise CommandError(f"--noinput needs the password in {PASSWORD_VARIABLE}")
        else:
            password = getpass.getpass(f"Password for {username}: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("the two passwords differ")
        try:
            validate_password(password, User(username=username))
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from None
        return password
