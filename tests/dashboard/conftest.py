"""Personas from delayq's role groups, and a site pointed at the session's real Redis."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from queue_core import DelayQueue


@pytest.fixture(autouse=True)
def api_as_described(monkeypatch):
    """Every JSON API exchange of every test here matches the OpenAPI description (openapi_check)."""
    from .openapi_check import install

    install(monkeypatch)


@pytest.fixture
def site_queue(redis_url, settings):
    """The dashboard's Redis is the session server (flushed per test)."""
    from django.core.cache import cache

    from dashboard.services.engine import get_queue
    from queue_core.layout import LayoutCache

    settings.DELAYQ_REDIS_URL = redis_url
    cache.clear()  # summaries are cached for a second; Redis was just flushed
    # So are the topic layouts the dashboard's queue read (LAYOUT_TTL): a test's "orders" must not
    # be the previous test's (a group it lacks, seen when two tests ran within those 2 s).
    get_queue()._layouts = LayoutCache()
    q = DelayQueue.from_url(redis_url)
    yield q
    q.redis.close()


def ensure_roles():
    """The role groups come from migration 0002; transactional tests flush tables between tests, so
    recreate them with the migration's own (idempotent) code when they are gone."""
    from dashboard import roles
    from dashboard.models import Role

    if Role.objects.count() < len(roles.ROLE_PERMISSIONS):
        from django.apps import apps
        from django.contrib.auth.management import create_permissions

        for label in ("delayq", "auth"):   # flushed with the rest; normally made after migrate
            create_permissions(apps.get_app_config(label), verbosity=0)
        roles.ensure_roles()


def _persona(django_user_model, name, role=None, **extra):
    from dashboard import roles

    ensure_roles()
    user = django_user_model.objects.create_user(name, password="pw", **extra)
    if role:
        user.groups.add(Group.objects.get(name=roles.group_name(role)))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def nobody(db, django_user_model):
    return _persona(django_user_model, "nobody")


@pytest.fixture
def viewer(db, django_user_model):
    return _persona(django_user_model, "viewer", "viewer")


@pytest.fixture
def operator(db, django_user_model):
    return _persona(django_user_model, "operator", "operator")


@pytest.fixture
def admin_user(db, django_user_model):
    return _persona(django_user_model, "boss", "admin", is_staff=True)


@pytest.fixture
def receiver():
    """A webhook receiver on 127.0.0.1 that records what it is sent (test_alerts.Receiver)."""
    from .test_alerts import Receiver

    r = Receiver()
    yield r
    r.stop()
