"""Checkpoint.saved_at and its source (``catalog.ages``), filled in from what is stored: the earliest newest-file time
of its copies, gone ones included (mtime on a host, LastModified in a bucket). A sidecar's ``saved_at`` was not
stored before; the next inventory of that location reads it and it wins. Checkpoints with no such time keep their
first-seen time as their age, and the pages say so."""

from django.db import migrations, models

BATCH = 1000


def backfill(apps, schema_editor):
    Checkpoint = apps.get_model("catalog", "Checkpoint")
    CheckpointCopy = apps.get_model("catalog", "CheckpointCopy")
    rows = (
        CheckpointCopy.objects.filter(newest_mtime__isnull=False)
        .values_list("checkpoint_id", "newest_mtime", "location__kind")
        .order_by("checkpoint_id", "newest_mtime", "pk")
    )
    batch = []
    last = None
    for checkpoint_id, when, kind in rows.iterator(chunk_size=5000):
        if checkpoint_id == last or when.timestamp() <= 0:
            continue
        last = checkpoint_id
        source = "last_modified" if kind == "bucket" else "mtime"
        batch.append(Checkpoint(pk=checkpoint_id, saved_at=when, saved_source=source))
        if len(batch) >= BATCH:
            Checkpoint.objects.bulk_update(batch, ["saved_at", "saved_source"])
            batch = []
    if batch:
        Checkpoint.objects.bulk_update(batch, ["saved_at", "saved_source"])


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0024_checkpoint_run_newest_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="saved_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="saved_source",
            field=models.CharField(
                blank=True,
                choices=[
                    ("sidecar", "the sidecar's saved_at"),
                    ("mtime", "the files' modification time"),
                    ("last_modified", "the objects' LastModified"),
                ],
                max_length=16,
                null=True,
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
