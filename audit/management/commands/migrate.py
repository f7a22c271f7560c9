"""Django's ``migrate``, run as the database owner when ``MIGRATE_DATABASE_URL`` names one.

The app's own role (``DATABASE_URL``) owns nothing and so cannot create or alter a table (docs/admin/database-roles.md);
the owner does that. Everything a migration touches (schema, data migrations, post-migrate handlers) goes through
the ``default`` connection, so this points that connection at the owner for the run instead of adding an alias that
half of them would not use. Without ``MIGRATE_DATABASE_URL`` it is Django's ``migrate`` unchanged.
"""

from django.core.management.commands.migrate import Command as DjangoMigrate

from ckptfleet.dbroles import use_owner_connection


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " As the owner role of MIGRATE_DATABASE_URL when it is set."

    def handle(self, *args, **options):
        if options["database"] == "default" and use_owner_connection():
            self.stdout.write("migrate: as the owner role of MIGRATE_DATABASE_URL")
        return super().handle(*args, **options)
