"""The database refuses to re-point a held or pinned checkpoint's copies, files or run (see ``actions.ownership``)."""

from django.db import migrations


def forward(apps, schema_editor):
    from actions import ownership

    ownership.install(schema_editor)


def backward(apps, schema_editor):
    from actions import ownership

    ownership.remove(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("actions", "0010_skipped_left_in_place"), ("catalog", "0024_checkpoint_run_newest_index")]
    operations = [migrations.RunPython(forward, backward)]
