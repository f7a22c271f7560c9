"""Give the app's database role the rights to read and write rows, and nothing more (PostgreSQL).

manage.py fleet_db_roles                        # as the owner: grants to DATABASE_URL's role, then checks it
manage.py fleet_db_roles --app-role ckptfleet_app --password-file /run/secrets/app_db_password   # creates it too
manage.py fleet_db_roles --print                # the SQL only, for a DBA to read and run
manage.py fleet_db_roles --check                # exit 1 naming every right the app role should not have

Runs as the owner (``MIGRATE_DATABASE_URL``, or ``DATABASE_URL`` when that names the owner), after every
``migrate``: it also turns every guard trigger ENABLE ALWAYS. docs/admin/database-roles.md has the whole model.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from ckptfleet.dbroles import app_role_problems, grant_statements, guard_triggers_always, use_owner_connection


class Command(BaseCommand):
    help = (
        "Grant the app's database role SELECT/INSERT/UPDATE/DELETE and sequence USAGE only, and check it owns nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--app-role", help="the app's role (default: the user of DATABASE_URL)")
        parser.add_argument(
            "--password-file", help="create the role when missing (LOGIN) and set its password from this file"
        )
        parser.add_argument("--print", action="store_true", help="print the SQL instead of running it")
        parser.add_argument("--check", action="store_true", help="only check the app role; change nothing")

    def handle(self, *args, **options):
        app_role = options["app_role"] or settings.DATABASES["default"]["USER"]
        use_owner_connection()
        if connection.vendor != "postgresql":
            raise CommandError("fleet_db_roles is for PostgreSQL; SQLite has no roles (the demo needs none)")
        owner_role = connection.settings_dict["USER"] or _current_user()
        if app_role == owner_role:
            raise CommandError(
                f"the app role and the owner are both {app_role}: give DATABASE_URL another role than the one that "
                "migrates (MIGRATE_DATABASE_URL), or name it with --app-role"
            )
        password = None
        if options["password_file"]:
            try:
                password = Path(options["password_file"]).read_text().strip()
            except OSError as exc:
                raise CommandError(f"--password-file {options['password_file']}: {exc.strerror}") from None
            if not password:
                raise CommandError(f"--password-file {options['password_file']} is empty")
        if options["check"]:
            return self._check(app_role)
        statements = grant_statements(
            app_role=app_role, owner_role=owner_role, database=connection.settings_dict["NAME"], password=password
        )
        if options["print"]:
            for statement in statements:
                shown = statement if "PASSWORD" not in statement else statement.split(" PASSWORD ")[0] + " PASSWORD ***"
                self.stdout.write(f"{shown};")
            return None
        with transaction.atomic(), connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
            changed = guard_triggers_always(cursor)
        if changed:
            self.stdout.write(f"guard triggers now ENABLE ALWAYS: {', '.join(changed)}")
        self.stdout.write(f"role {app_role}: SELECT, INSERT, UPDATE, DELETE on the tables of {owner_role}")
        return self._check(app_role)

    def _check(self, app_role: str) -> None:
        with connection.cursor() as cursor:
            problems = app_role_problems(cursor, app_role)
        if problems:
            raise CommandError("; ".join(problems))
        self.stdout.write(f"role {app_role} owns nothing and may only read and write rows")


def _current_user() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        return cursor.fetchone()[0]
