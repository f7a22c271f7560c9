"""The ownership guards of actions 0011 fire ALWAYS too, like every other guard trigger (audit 0004).

The two branches that made them landed side by side: audit 0004 turned the triggers that existed then to ENABLE
ALWAYS, and actions 0011 added three more in the default (origin) state, which a session with
``session_replication_role = replica`` would skip. SQLite has no such mode and nothing to do.
"""

from django.db import migrations

from ckptfleet.dbroles import guard_triggers_always


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            guard_triggers_always(cursor)


class Migration(migrations.Migration):
    dependencies = [
        ("actions", "0011_protection_follows_the_data"),
        ("audit", "0004_guard_triggers_always"),
    ]
    # Going back leaves them ALWAYS: actions 0011's own reverse drops them, and audit 0004's reverse sets every
    # trigger back to its default state.
    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
