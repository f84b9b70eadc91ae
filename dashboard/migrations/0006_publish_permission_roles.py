"""The operator and admin roles get publish_message (added to QueueAccess in 0005); the admin role
gets view_apitoken and change_apitoken (to see and revoke anyone's token in the Django admin)."""

from django.db import migrations


def add_permission(apps, schema_editor):
    from dashboard.roles import ALERT_PERMISSIONS, create_permissions_now, ensure_roles

    create_permissions_now(apps)
    ensure_roles(apps, later=ALERT_PERMISSIONS)   # 0008 adds those


class Migration(migrations.Migration):
    dependencies = [("delayq", "0005_api_tokens")]
    operations = [migrations.RunPython(add_permission, migrations.RunPython.noop)]
