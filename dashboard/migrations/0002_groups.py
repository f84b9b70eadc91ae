"""The ready-made groups: Viewer, Operator, Admin, with the dashboard's permissions."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

from dashboard.migrations_groups import GROUPS


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations (post_migrate); create them now so the
    # groups can reference them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(content_type__app_label="dashboard", codename__in=codenames)
        missing = set(codenames) - set(perms.values_list("codename", flat=True))
        if missing:
            raise RuntimeError(f"permissions missing for group {name}: {sorted(missing)}")
        group.permissions.add(*perms)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_groups, remove_groups)]
