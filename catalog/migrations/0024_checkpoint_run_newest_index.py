"""A run's checkpoints newest first, as the pages list them (``step DESC NULLS LAST, tag``), read from an index
rather than sorted whole: a page of a 5,000-checkpoint run stops at the page's end.

PostgreSQL only: SQLite cannot put NULLS LAST in an index (and sorts a run's few thousand rows quickly enough)."""

from django.db import migrations, models

INDEX = models.Index(
    models.F("run"),
    models.OrderBy(models.F("step"), descending=True, nulls_last=True),
    models.F("tag"),
    name="checkpoint_run_newest",
)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(apps.get_model("catalog", "Checkpoint"), INDEX)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(apps.get_model("catalog", "Checkpoint"), INDEX)


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0023_copy_verification_changed_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="checkpoint", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
