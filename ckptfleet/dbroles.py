"""The database role model on PostgreSQL: an owner that migrates, an app role that owns nothing.

The guard triggers (audit events append-only, the chain head only forward, compliance holds, retention locks) are
the database's own word on the promises; whoever may ``ALTER TABLE ... DISABLE TRIGGER`` or ``SET
session_replication_role = replica`` gets past them. Both need more than the app ever needs: the first the table's
ownership, the second superuser (or a role granted ``SET`` on that parameter, PostgreSQL 15+). So:

- the **owner** role creates and alters the tables (``manage.py migrate`` with ``MIGRATE_DATABASE_URL``, the
  ``owner`` alias), and keeps those rights: docs/admin/database-roles.md says exactly what it can still do;
- the **app** role (``DATABASE_URL``: web, workers, beat) gets SELECT, INSERT, UPDATE and DELETE on the tables and
  USAGE and SELECT on the sequences, nothing else: no ownership, no TRUNCATE, no TRIGGER, no REFERENCES, no CREATE
  in the schema, not superuser, not a member of the owner;
- every guard trigger is ``ENABLE ALWAYS``, so even a session with ``session_replication_role = replica`` (which
  skips ordinary triggers, and which only the owner's kind of role could set) runs it.

``grant_statements`` is what ``manage.py fleet_db_roles`` runs as the owner (or prints with ``--print``).
"""

from __future__ import annotations

import re

from django.core.exceptions import ImproperlyConfigured

# A role name we put into SQL ourselves: plain lower-case identifiers only, so it needs no quoting rules.
ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# The tables whose triggers the database keeps the promises with; every user trigger on them is a guard.
# ``guard_triggers_always`` looks the triggers up, so a trigger added later by a migration is covered the next time
# ``fleet_db_roles`` runs, even if its migration forgot ENABLE ALWAYS.
GUARD_TRIGGERS_SQL = """
    SELECT c.relname, t.tgname, t.tgenabled
    FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal AND n.nspname = current_schema()
    ORDER BY c.relname, t.tgname
"""

# Triggers the test runner switches off to flush between tests (tests/conftest.py); production keeps them ALWAYS.
TEST_FLUSH_TRIGGERS = frozenset(
    {"catalog_auditevent_no_truncate", "audit_chain_head_no_truncate", "actions_hold_no_truncate"}
)


def check_role_name(name: str) -> str:
    if not ROLE_NAME.match(name or ""):
        raise ImproperlyConfigured(f"{name!r} is not a role name this command writes (a-z, 0-9 and _, 63 at most)")
    return name


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def guard_triggers(cursor) -> list[tuple[str, str, str]]:
    """(table, trigger, tgenabled) of every user trigger in the current schema; 'A' is ENABLE ALWAYS."""
    cursor.execute(GUARD_TRIGGERS_SQL)
    return [
        (table, name, enabled.decode() if isinstance(enabled, bytes) else enabled) for table, name, enabled in cursor
    ]


def guard_triggers_always(cursor, *, skip: frozenset[str] = frozenset()) -> list[str]:
    """Make every user trigger of the current schema ENABLE ALWAYS (as the tables' owner); the ``table.trigger``
    names it changed. A trigger found disabled is switched on again: a guard that is off guards nothing."""
    changed = []
    for table, name, enabled in guard_triggers(cursor):
        if enabled != "A" and name not in skip:
            cursor.execute(f'ALTER TABLE "{table}" ENABLE ALWAYS TRIGGER "{name}"')
            changed.append(f"{table}.{name}")
    return changed


def grant_statements(*, app_role: str, owner_role: str, database: str, password: str | None = None) -> list[str]:
    """The SQL that makes ``app_role`` a role that may read and write the rows and nothing more.

    ``password``: create the role (LOGIN) when it does not exist, and set its password; without one the role must
    exist already (a DBA created it, e.g. with a password or a certificate of its own)."""
    app = check_role_name(app_role)
    owner = check_role_name(owner_role)
    statements = []
    if password is not None:
        # The name is checked against ROLE_NAME above, and a DO block takes no parameters.
        statements.append(
            "DO $$ BEGIN "  # noqa: S608
            f"IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {quote_literal(app)}) THEN "
            f"CREATE ROLE {app} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS; END IF; END $$"
        )
        statements.append(f"ALTER ROLE {app} WITH LOGIN PASSWORD {quote_literal(password)}")
    statements += [
        f'GRANT CONNECT ON DATABASE "{database}" TO {app}',
        f"GRANT USAGE ON SCHEMA public TO {app}",
        f"REVOKE CREATE ON SCHEMA public FROM {app}",
        # Whatever it was given before (by hand, or by an older set-up that let it own the tables) goes first.
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {app}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {app}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {app}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {app}",
        # Tables and sequences the owner creates later (the next migrate) come with the same rights.
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {app}",
    ]
    return statements


ROLE_FACTS_SQL = """
    SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolbypassrls,
           (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relowner = r.oid),
           (SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid)
    FROM pg_roles r WHERE r.rolname = %s
"""


def app_role_problems(cursor, role: str) -> list[str]:
    """What is wrong with ``role`` as the app's role, in sentences; empty when it owns nothing and may do nothing
    more than read and write rows. ``fleet_db_roles --check`` and the test of the role model ask this."""
    cursor.execute(ROLE_FACTS_SQL, [role])
    row = cursor.fetchone()
    if row is None:
        return [f"role {role} does not exist"]
    superuser, createrole, createdb, replication, bypassrls, owned, memberships = row
    problems = []
    for flag, what in (
        (superuser, "is a superuser (it may disable any trigger and set session_replication_role)"),
        (createrole, "may create roles"),
        (createdb, "may create databases"),
        (replication, "is a replication role"),
        (bypassrls, "bypasses row-level security"),
    ):
        if flag:
            problems.append(f"role {role} {what}")
    if owned:
        problems.append(f"role {role} owns {owned} table(s), sequence(s) or view(s): an owner may disable triggers")
    if memberships:
        problems.append(f"role {role} is a member of {memberships} other role(s), whose rights it may inherit")
    return problems


def use_owner_connection() -> bool:
    """Point the ``default`` connection at the owner (``MIGRATE_DATABASE_URL``) for the rest of this process.

    ``migrate`` and ``fleet_db_roles`` call it first: every migration, data migration and post-migrate handler then
    runs as the owner, on the one alias they all know, instead of some on an alias and some on the app's connection.
    False (and nothing changed) when no owner URL is set: one role does both, as on SQLite and in the demo."""
    from django.conf import settings
    from django.db import connections

    owner = settings.MIGRATE_DATABASE
    if owner is None:
        return False
    connection = connections["default"]
    connection.close()
    connection.settings_dict.update({key: owner[key] for key in ("USER", "PASSWORD", "OPTIONS")})
    return True
