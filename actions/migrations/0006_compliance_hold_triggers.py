"""The database refuses what a compliance hold forbids, whoever asks (see ``actions.holdguard``)."""

from django.db import migrations


def forward(apps, schema_editor):
    from actions import holdguard

    holdguard.install(schema_editor)


def backward(apps, schema_editor):
    from actions import holdguard

    holdguard.remove(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("actions", "0005_hold_modes")]
    operations = [migrations.RunPython(forward, backward)]
