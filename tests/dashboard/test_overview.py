import pytest
from django.urls import reverse

from queue_core import DelayQueue

pytestmark = pytest.mark.django_db


@pytest.fixture
def site_queue(redis_url, settings):
    settings.DELAYQ_REDIS_URL = redis_url
    return DelayQueue.from_url(redis_url)


@pytest.fixture
def viewer(django_user_model, client):
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    return client


def test_it_requires_login(client, site_queue):
    response = client.get(reverse("dashboard:overview"))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_it_lists_topics_with_counts(viewer, site_queue):
    site_queue.publish_many("orders", ["a", "b"])
    site_queue.publish("orders", "c", delay=60)
    response = viewer.get(reverse("dashboard:overview"))
    assert response.status_code == 200
    assert "dashboard/overview.html" in [t.name for t in response.templates]
    html = response.content.decode()
    assert "orders" in html
    assert '<td class="ready" data-state="ready">2</td>' in html
    assert '<td class="pending" data-state="pending">1</td>' in html
    assert "htmx" in html  # full page loads the htmx script


def test_it_serves_only_the_summary_to_htmx(viewer, site_queue):
    site_queue.publish("orders", "a")
    response = viewer.get(reverse("dashboard:overview"), headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="summary"')
    assert "<html" not in html and "orders" in html


def test_it_escapes_topic_names_and_explains_empty(viewer, site_queue):
    response = viewer.get(reverse("dashboard:overview"))
    assert "No topics yet" in response.content.decode()


def test_it_says_when_redis_is_down(viewer, settings):
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:1/0"
    response = viewer.get(reverse("dashboard:overview"))
    assert response.status_code == 200
    assert "Redis is unreachable" in response.content.decode()
