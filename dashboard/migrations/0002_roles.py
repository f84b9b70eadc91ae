"""delayq's three roles as auth groups. Creates only the missing ones and never touches a group
delayq did not create (see dashboard/roles.py); unapplying removes exactly the groups it created."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from dashboard.roles import create_permissions_now, ensure_roles

    create_permissions_now(apps)
    # These come with 0005 (and the roles get them in 0006), and the alert permissions with 0008.
    from dashboard.roles import ALERT_PERMISSIONS

    later = frozenset({"publish_message", "view_apitoken", "change_apitoken"}) | ALERT_PERMISSIONS
    for outcome in ensure_roles(apps, later=later):
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
