import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.urls import reverse

from dashboard import roles
from dashboard.models import Role

pytestmark = pytest.mark.django_db


def _codenames(group: Group) -> set[str]:
    return set(group.permissions.values_list("codename", flat=True))


def test_roles_exist_with_their_permissions():
    for role, codenames in roles.ROLE_PERMISSIONS.items():
        group = Group.objects.get(name=f"delayq {role}")            # created by migration 0002
        assert Role.objects.get(role=role).group == group
        assert _codenames(group) == set(codenames)
        assert set(group.permissions.values_list("content_type__app_label", flat=True)) == {"delayq"}
    assert "view_payload" not in roles.ROLE_PERMISSIONS["operator"]  # unredacted payloads are an explicit grant


def test_roles_leave_the_hosts_groups_alone(settings):
    """A host's own "Admin" group, or one that happens to carry a delayq role's name, is never
    changed by dq_roles and never removed by --remove."""
    roles.remove_roles()
    host_admin = Group.objects.create(name="Admin")
    host_admin.permissions.add(Permission.objects.get(codename="view_user"))
    lookalike = Group.objects.create(name="delayq viewer")
    call_command("dq_roles")
    assert _codenames(host_admin) == {"view_user"}
    assert _codenames(lookalike) == set()
    assert not Role.objects.filter(role="viewer").exists()           # skipped, reported, not adopted
    assert set(Role.objects.values_list("role", flat=True)) == {"operator", "admin"}

    settings.DELAYQ_ROLE_NAMES = {"viewer": "queue readers"}
    call_command("dq_roles")
    assert _codenames(Group.objects.get(name="queue readers")) == {"view_queue"}
    assert roles.group_name("viewer") == "queue readers"

    # An administrator adds another app's permission to delayq's admin group: dq_roles keeps it.
    delayq_admin = Group.objects.get(name="delayq admin")
    delayq_admin.permissions.add(Permission.objects.get(codename="view_user"))
    call_command("dq_roles")
    assert "view_user" in _codenames(delayq_admin)

    call_command("dq_roles", "--remove")
    assert set(Group.objects.values_list("name", flat=True)) == {"Admin", "delayq viewer"}
    assert _codenames(host_admin) == {"view_user"}


@pytest.mark.parametrize("persona, overview, pause", [
    ("nobody", 403, 403),
    ("viewer", 200, 403),
    ("operator", 200, 403),
    ("admin_user", 200, 302),
])
def test_permission_matrix(request, site_queue, persona, overview, pause):
    client = request.getfixturevalue(persona)
    site_queue.publish("orders", "x")
    assert client.get(reverse("delayq:overview")).status_code == overview
    assert client.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "1"}).status_code == pause
    assert client.post(reverse("delayq:topic_adopt", args=["orders"])).status_code == pause
    assert site_queue.topic_config("orders").paused is (pause == 302)


def test_actions_need_post_and_csrf(site_queue, admin_user, django_user_model):
    assert admin_user.get(reverse("delayq:topic_pause", args=["orders"])).status_code == 405
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user.user)
    assert strict.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "1"}).status_code == 403


def test_anonymous_actions_go_to_login(client, site_queue):
    response = client.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "1"})
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
