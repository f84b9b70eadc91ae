"""The operator and admin roles get publish_message (added to QueueAccess in 0005)."""

from django.db import migrations


def add_permission(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    from dashboard.roles import ensure_roles

    for app_config in apps.get_app_configs():    # as in 0002: permissions exist only after migrate
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    ensure_roles(apps)


class Migration(migrations.Migration):
    dependencies = [("delayq", "0005_api_tokens")]
    operations = [migrations.RunPython(add_permission, migrations.RunPython.noop)]
