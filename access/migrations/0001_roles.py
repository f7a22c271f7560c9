"""Create one Django group per role, so that an admin grants a role by adding a person to a group."""

from django.db import migrations

ROLES = ["viewer", "finance", "operator", "approver", "admin"]


def create_groups(apps, schema_editor):
    group_model = apps.get_model("auth", "Group")
    for name in ROLES:
        group_model.objects.get_or_create(name=name)


class Migration(migrations.Migration):
    dependencies = [("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
