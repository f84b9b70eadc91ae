import re

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


def test_overdue_pending_is_shown_with_a_warning(viewer, site_queue):
    """Without a worker, a due message stays pending; the console says so instead of calling it
    "not yet due"."""
    from django.core.cache import cache

    from tests.conftest import wait_for

    site_queue.publish("orders", "later", delay=3600)
    site_queue.publish("orders", "due", delay=0.01)
    assert site_queue.throughput("orders")["overdue_pending"] == 0
    wait_for(lambda: site_queue.throughput("orders")["overdue_pending"] == 1, 10, "the message overdue")
    summary = site_queue.throughput("orders")
    assert summary["oldest_overdue_age_s"] >= 1.0
    cache.clear()
    overview = viewer.get(reverse("delayq:overview")).content.decode()
    assert re.search(r"1 overdue pending, oldest [1-9]\d* s", overview)
    page = viewer.get(reverse("delayq:topic_state", args=["orders", "pending"])).content.decode()
    assert "1 pending message is overdue" in page and "Start a worker for group default of orders" in page
    site_queue.claim("orders")                       # a worker's claim promotes it
    assert site_queue.throughput("orders")["overdue_pending"] == 0


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-topic="([^"]+)"', html)


def test_many_topics_are_paged_and_searchable(viewer, site_queue):
    names = [f"t{i:03d}" for i in range(130)] + ["orders-eu", "Orders-us"]
    for name in names:
        site_queue.publish(name, "x")
    url = reverse("delayq:overview")
    first = viewer.get(url).content.decode()
    assert listed(first) == sorted(names)[:50]
    assert "Topics 1–50 of 132 · page 1 of 3" in first and 'href="?page=2" rel="next"' in first
    last = viewer.get(url + "?page=3").content.decode()
    assert listed(last) == sorted(names)[100:] and 'href="?page=2" rel="prev"' in last and 'rel="next"' not in last
    # The search narrows before any summary is read, ignores case, and survives the htmx poll.
    found = viewer.get(url + "?q=ORDERS").content.decode()
    assert listed(found) == ["Orders-us", "orders-eu"] and "of 2 matching “ORDERS”" in found
    assert f'data-live="{url}?q=ORDERS&amp;page=1"' in found
    polled = viewer.get(url + "?q=ORDERS&page=1", headers={"HX-Request": "true"}).content.decode()
    assert listed(polled) == ["Orders-us", "orders-eu"]
    assert "No topic name contains “nothing”" in viewer.get(url + "?q=nothing").content.decode()
    assert listed(viewer.get(url + "?page=9").content.decode()) == []
    assert listed(viewer.get(url + "?page=junk").content.decode()) == sorted(names)[:50]
