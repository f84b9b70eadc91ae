"""Personas from the ready-made groups, and a site pointed at the session's real Redis."""

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from queue_core import DelayQueue


@pytest.fixture
def site_queue(redis_url, settings):
    """The dashboard's Redis is the session server (flushed per test)."""
    from django.core.cache import cache

    settings.DELAYQ_REDIS_URL = redis_url
    cache.clear()  # summaries are cached for a second; Redis was just flushed
    q = DelayQueue.from_url(redis_url)
    yield q
    q.redis.close()


def ensure_groups():
    """The groups come from migration 0002; transactional tests flush tables between tests, so
    recreate them with the migration's own (idempotent) code when they are gone."""
    import importlib

    from django.apps import apps

    if Group.objects.filter(name="Admin").exists():
        return
    importlib.import_module("dashboard.migrations.0002_groups").create_groups(apps, None)


def _persona(django_user_model, name, group=None, **extra):
    ensure_groups()
    user = django_user_model.objects.create_user(name, password="pw", **extra)
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    client.user = user
    return client


@pytest.fixture
def nobody(db, django_user_model):
    return _persona(django_user_model, "nobody")


@pytest.fixture
def viewer(db, django_user_model):
    return _persona(django_user_model, "viewer", "Viewer")


@pytest.fixture
def operator(db, django_user_model):
    return _persona(django_user_model, "operator", "Operator")


@pytest.fixture
def admin_user(db, django_user_model):
    return _persona(django_user_model, "boss", "Admin", is_staff=True)
