"""Topic tabs, message detail, redaction, escaping, corrupt rows; each with and without htmx."""

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, RetryPolicy, Topic
from queue_core import RetryPolicy as EnginePolicy

from .helpers import state_counts

pytestmark = pytest.mark.django_db


def kill(q, topic, payloads, error="boom"):
    q.configure_topic(topic, retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = q.publish_many(topic, payloads)
    for d in q.claim(topic, len(payloads)):
        q.nack(d, error)
    return ids


def test_it_shows_a_state_tab_with_counts(viewer, site_queue):
    kill(site_queue, "orders", ["a", "b"])
    site_queue.publish("orders", "later", delay=60)
    response = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"]))
    html = response.content.decode()
    assert response.status_code == 200 and "delayq/topic.html" in [t.name for t in response.templates]
    assert state_counts(html)["dead"] == 2 and state_counts(html)["pending"] == 1
    assert "Error groups" in html and "boom" in html
    assert "Replay selected" not in html  # a viewer sees no action buttons


def test_it_serves_regions_to_htmx(viewer, site_queue):
    kill(site_queue, "orders", ["a"])
    url = reverse("delayq:topic_state", args=["orders", "dead"])
    messages = viewer.get(url, headers={"HX-Request": "true"}).content.decode()
    assert messages.lstrip().startswith('<section id="messages"') and "<html" not in messages
    assert 'class="dead current"' in messages  # the tab bar travels with the region it belongs to
    counts = viewer.get(reverse("delayq:topic", args=["orders"]) + "?region=counts",
                        headers={"HX-Request": "true"}).content.decode()
    assert counts.lstrip().startswith('<section id="counts"') and state_counts(counts)["dead"] == 1


def test_it_paginates_with_a_cursor(viewer, site_queue):
    ids = site_queue.publish_many("orders", [str(i) for i in range(120)])
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    seen, query = [], ""
    for _ in range(5):
        response = viewer.get(url + query)
        page_ids = [i for i in ids if f'data-id="{i}"' in response.content.decode()]
        seen += page_ids
        cursor = response.context["next_cursor"]
        if not cursor:
            break
        query = f"?after={cursor}"
    assert seen == ids


def test_it_searches_by_id_and_by_key(viewer, site_queue):
    mid = site_queue.publish("orders", "x", key="order-42")
    site_queue.publish_many("orders", ["y"] * 5)
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    for q in (mid, "order-42"):
        rows = viewer.get(url, {"q": q}).context["rows"]
        assert [r["m"].id for r in rows] == [mid]


def test_it_filters_by_time_range_and_error_group(viewer, site_queue):
    kill(site_queue, "orders", ["a", "b"], error="db down")
    kill(site_queue, "orders", ["c"], error="bad input")
    group = next(g for g in site_queue.error_groups("orders") if g.sample_message == "db down")
    url = reverse("delayq:topic_state", args=["orders", "dead"])
    rows = viewer.get(url, {"fp": group.fingerprint}).context["rows"]
    assert sorted(r["m"].text() for r in rows) == ["a", "b"]
    assert viewer.get(url, {"from": "2999-01-01T00:00:00"}).context["rows"] == []
    assert len(viewer.get(url, {"to": "2999-01-01T00:00:00"}).context["rows"]) == 3


def test_it_escapes_payloads_and_errors(viewer, site_queue):
    kill(site_queue, "orders", ['<script>alert("x")</script>'], error='<img src=x onerror="alert(1)">')
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<img src=x" not in html


def test_it_redacts_payloads_for_users_without_view_payload(viewer, admin_user, site_queue,
                                                            django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="orders", retry_policy=policy, redaction_rules=["password", "card.number"])
    mid = site_queue.publish("orders", {"user": "ann", "password": "hunter2", "card": {"number": "4111"}})
    url = reverse("delayq:message", args=["orders", mid])
    html = viewer.get(url).content.decode()
    assert "hunter2" not in html and "4111" not in html and "ann" in html and "Redacted" in html
    assert "hunter2" not in viewer.get(reverse("delayq:message_payload", args=["orders", mid])).content.decode()
    assert "hunter2" in admin_user.get(url).content.decode()
    admin_user.get(url + "?reveal=1")
    assert AuditEntry.objects.filter(action="payload.reveal", message_ids=[mid]).exists()


def test_it_truncates_large_payloads_with_a_download_link(viewer, site_queue):
    mid = site_queue.publish("orders", {"blob": "x" * 5000})
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "ready"])).content.decode()
    assert reverse("delayq:message_payload", args=["orders", mid]) in html
    assert "x" * 1000 not in html


def test_message_detail_shows_attempts_history_and_error(viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(30, max_attempts=3))
    mid = site_queue.publish("orders", {"n": 1}, headers={"trace": "t-1"})
    try:
        raise ValueError("price missing")
    except ValueError as exc:
        site_queue.nack(site_queue.claim("orders")[0], exc)
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert "attempt 1 of 3" in html and "retry 30 s after the next failure" in html
    assert "price missing" in html and "Traceback" in html and "t-1" in html
    assert html.index("nacked") < html.index("published")  # newest first


def test_corrupt_messages_render_as_corrupt_rows(admin_user, site_queue):
    ids = kill(site_queue, "orders", ["a", "b"])
    site_queue.redis.hset(site_queue.keys("orders").info, ids[0], "{broken")
    response = admin_user.get(reverse("delayq:topic_state", args=["orders", "dead"]))
    html = response.content.decode()
    assert response.status_code == 200 and "corrupt" in html
    detail = admin_user.get(reverse("delayq:message", args=["orders", ids[0]]))
    assert detail.status_code == 200 and "cannot be delivered" in detail.content.decode()


def test_unknown_topic_and_state_are_404(viewer, site_queue):
    assert viewer.get(reverse("delayq:topic", args=["nope"])).status_code == 404
    site_queue.publish("orders", "x")
    assert viewer.get(reverse("delayq:topic_state", args=["orders", "lost"])).status_code == 404
    assert viewer.get(reverse("delayq:message", args=["orders", "NOPE"])).status_code == 404


def test_it_works_under_a_url_prefix(viewer, site_queue, settings):
    settings.ROOT_URLCONF = "tests.dashboard.prefixed_urls"
    site_queue.publish("orders", "x")
    html = viewer.get("/ops/queue/").content.decode()
    assert 'href="/ops/queue/topics/orders/"' in html
