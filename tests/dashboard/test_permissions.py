import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from dashboard.migrations_groups import GROUPS

pytestmark = pytest.mark.django_db


def test_groups_exist_with_their_permissions():
    for name, codenames in GROUPS.items():
        perms = set(Group.objects.get(name=name).permissions.values_list("codename", flat=True))
        assert perms == set(codenames)
    assert "view_payload" not in GROUPS["Operator"]  # unredacted payloads are an explicit grant


@pytest.mark.parametrize("persona, overview, pause", [
    ("nobody", 403, 403),
    ("viewer", 200, 403),
    ("operator", 200, 403),
    ("admin_user", 200, 302),
])
def test_permission_matrix(request, site_queue, persona, overview, pause):
    client = request.getfixturevalue(persona)
    site_queue.publish("orders", "x")
    assert client.get(reverse("dashboard:overview")).status_code == overview
    assert client.post(reverse("dashboard:topic_pause", args=["orders"]), {"paused": "1"}).status_code == pause
    assert client.post(reverse("dashboard:topic_adopt", args=["orders"])).status_code == pause
    assert site_queue.topic_config("orders").paused is (pause == 302)


def test_actions_need_post_and_csrf(site_queue, admin_user, django_user_model):
    assert admin_user.get(reverse("dashboard:topic_pause", args=["orders"])).status_code == 405
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user.user)
    assert strict.post(reverse("dashboard:topic_pause", args=["orders"]), {"paused": "1"}).status_code == 403


def test_anonymous_actions_go_to_login(client, site_queue):
    response = client.post(reverse("dashboard:topic_pause", args=["orders"]), {"paused": "1"})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
