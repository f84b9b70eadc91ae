"""delayq's three roles as auth groups, created without touching any group delayq did not create.

A host project often has groups of its own ("Admin", "Operators"). delayq creates its groups under
distinct names (DELAYQ_ROLE_NAMES, default "delayq viewer", "delayq operator", "delayq admin") and
records each one it created in a Role row, so that removing delayq's roles removes exactly those,
and a host group that happens to carry one of the names is reported and left alone.

Used by migration 0002 (with the historical models) and by ``manage.py dq_roles``.
"""

from dataclasses import dataclass

from . import conf

APP_LABEL = "delayq"

# role -> the permissions it grants (codenames of app "delayq")
# Alert rules are set in the Django admin by the admin role (migration 0008 creates them).
ALERT_PERMISSIONS = frozenset({"view_alertrule", "add_alertrule", "change_alertrule", "delete_alertrule",
                               "view_alertevent"})
ROLE_PERMISSIONS = {
    "viewer": ["view_queue"],
    "operator": ["view_queue", "replay_message", "delete_message", "run_analytics", "publish_message"],
    "admin": ["view_queue", "view_payload", "replay_message", "delete_message", "purge_topic", "manage_topics",
              "publish_message", "run_analytics", "view_auditentry", "view_bulkoperation",
              "view_apitoken", "change_apitoken",       # see and revoke anyone's API token
              *sorted(ALERT_PERMISSIONS)],
}


@dataclass(frozen=True)
class Outcome:
    role: str
    group: str
    status: str        # "created", "updated", "unchanged", "skipped" (a host group has the name), "removed"
    detail: str = ""


def _models(apps):
    if apps is None:
        from django.contrib.auth.models import Group, Permission

        from .models import Role
        return Group, Permission, Role
    return apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"), apps.get_model(APP_LABEL, "Role")


def create_permissions_now(apps) -> None:
    """In a migration: Django creates permissions only after all migrations (post_migrate); create
    them now so the roles can reference them on a fresh database."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None


def ensure_roles(apps=None, *, later: frozenset = frozenset()) -> list[Outcome]:
    """Create the missing roles and give delayq's own groups exactly their delayq permissions (other
    apps' permissions an administrator added to them are kept). Idempotent. ``later``: permissions a
    later migration adds (an early migration's models do not have them yet)."""
    Group, Permission, Role = _models(apps)
    names = conf.role_names()
    outcomes = []
    for role, codenames in ROLE_PERMISSIONS.items():
        name = names[role]
        perms = list(Permission.objects.filter(content_type__app_label=APP_LABEL, codename__in=codenames))
        missing = set(codenames) - {p.codename for p in perms} - later
        if missing:
            raise RuntimeError(f"delayq permissions missing for role {role}: {sorted(missing)}; run migrate first")
        record = Role.objects.filter(role=role).select_related("group").first()
        if record is None:
            if Group.objects.filter(name=name).exists():
                outcomes.append(Outcome(role, name, "skipped",
                                        f"a group named {name!r} exists and was not created by delayq: it is left "
                                        "as it is. Choose another name in DELAYQ_ROLE_NAMES and run dq_roles."))
                continue
            group = Group.objects.create(name=name)
            Role.objects.create(role=role, group=group)
            group.permissions.add(*perms)
            outcomes.append(Outcome(role, name, "created"))
            continue
        group = record.group
        status = "unchanged"
        if group.name != name:
            if Group.objects.filter(name=name).exclude(pk=group.pk).exists():
                outcomes.append(Outcome(role, group.name, "skipped",
                                        f"cannot rename to {name!r}: a group of that name exists"))
                continue
            group.name = name
            group.save(update_fields=["name"])
            status = "updated"
        have = set(group.permissions.filter(content_type__app_label=APP_LABEL))
        want = set(perms)
        if have != want:
            group.permissions.remove(*(p for p in have - want if p.codename not in later))
            group.permissions.add(*(want - have))
            status = "updated"
        outcomes.append(Outcome(role, name, status))
    return outcomes


def remove_roles(apps=None) -> list[Outcome]:
    """Delete the groups delayq created (and only those)."""
    Group, _, Role = _models(apps)
    outcomes = []
    for record in Role.objects.select_related("group"):
        outcomes.append(Outcome(record.role, record.group.name, "removed"))
        Group.objects.filter(pk=record.group_id).delete()   # cascades to the Role row
    return outcomes


def group_name(role: str) -> str:
    """The auth group that holds ``role`` now (renamed groups included)."""
    from .models import Role

    record = Role.objects.filter(role=role).select_related("group").first()
    return record.group.name if record else conf.role_names()[role]
