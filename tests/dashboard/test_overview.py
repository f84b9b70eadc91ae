import pytest
from django.urls import reverse

from .helpers import state_counts

pytestmark = pytest.mark.django_db


def test_it_requires_login(client, site_queue):
    response = client.get(reverse("delayq:overview"))
    assert response.status_code == 302 and response["Location"].startswith("/login/?next=")


def test_it_lists_topics_with_counts(viewer, site_queue):
    site_queue.publish_many("orders", ["a", "b"])
    site_queue.publish("orders", "c", delay=60)
    response = viewer.get(reverse("delayq:overview"))
    assert response.status_code == 200
    assert "delayq/overview.html" in [t.name for t in response.templates]
    html = response.content.decode()
    assert state_counts(html, "orders") == {"pending": 1, "ready": 2, "unacked": 0, "retrying": 0, "dead": 0}
    assert "htmx" in html  # full page loads the htmx script
    assert "no workers" in html  # nothing consumes orders yet


def test_it_serves_only_the_summary_to_htmx(viewer, site_queue):
    site_queue.publish("orders", "a")
    response = viewer.get(reverse("delayq:overview"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="summary"')
    assert "<html" not in html and "orders" in html


def test_it_refuses_users_without_view_queue(nobody, site_queue):
    assert nobody.get(reverse("delayq:overview")).status_code == 403


def test_it_explains_an_empty_queue(viewer, site_queue):
    response = viewer.get(reverse("delayq:overview"))
    assert "No topics yet" in response.content.decode()


def test_it_says_when_redis_is_down(viewer, settings):
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:1/0"
    response = viewer.get(reverse("delayq:overview"))
    assert response.status_code == 200
    assert "Redis is unreachable" in response.content.decode()
