"""delayq's three roles as auth groups. Creates only the missing ones and never touches a group
delayq did not create (see dashboard/roles.py); unapplying removes exactly the groups it created."""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def create_roles(apps, schema_editor):
    from dashboard.roles import ensure_roles

    # Permissions are normally created after all migrations (post_migrate); create them now so the
    # roles can reference them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    # publish_message comes with 0005 (and the roles get it in 0006).
    for outcome in ensure_roles(apps, later=frozenset({"publish_message"})):
        if outcome.status == "skipped":
            print(f"\n  delayq: role {outcome.role} not created: {outcome.detail}")


def remove_roles(apps, schema_editor):
    from dashboard.roles import remove_roles

    remove_roles(apps)


class Migration(migrations.Migration):
    dependencies = [
        ("delayq", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_roles, remove_roles)]
