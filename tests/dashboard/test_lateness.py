"""Why a delivery was late, on the message page, the topic page and the JSON API (issue 38, point 1)."""

import re

from django.urls import reverse

from tests.queue_core.helpers import poll, server_ms


def claimed_late(q, topic="orders", late_ms=60):
    """A message claimed ``late_ms`` after its due time, with no worker claiming before."""
    q.configure_topic(topic)
    mid = q.publish(topic, '{"n": 1}')
    due = int(q.get(topic, mid).due_at.timestamp() * 1000)
    poll(lambda: server_ms(q) >= due + late_ms)
    assert [d.id for d in q.claim(topic, 1)] == [mid]
    return mid


def test_it_says_why_late_in_words(viewer, site_queue):
    mid = claimed_late(site_queue)
    page = viewer.get(reverse("delayq:message", args=["orders", "default", mid])).content.decode()
    assert re.search(r'data-testid="lateness-cause">late \d+ ms: no worker was claiming<', page)


def test_it_says_nothing_for_an_on_time_message(viewer, site_queue):
    site_queue.configure_topic("orders")
    mid = site_queue.publish("orders", "x", delay=3600)
    page = viewer.get(reverse("delayq:message", args=["orders", "default", mid])).content.decode()
    assert 'data-testid="lateness-cause"' not in page


def test_it_stacks_causes_on_the_topic_page(viewer, site_queue):
    claimed_late(site_queue)
    url = reverse("delayq:topic_state", args=["orders", "default", "unacked"])
    page = viewer.get(url).content.decode()
    assert 'data-testid="lateness-causes"' in page
    assert 'data-series="no worker"' in page and "no worker 1</span>" in page


def test_it_gives_the_cause_in_the_api(viewer, site_queue):
    mid = claimed_late(site_queue)
    one = viewer.get(reverse("delayq:api_message", args=["orders", "default", mid])).json()
    assert (one["lateness_cause"], one["late_behind"]) == ("no_worker", None)
    page = viewer.get(reverse("delayq:api_messages", args=["orders", "default", "unacked"])).json()
    assert [m["lateness_cause"] for m in page["messages"]] == ["no_worker"]


def test_finding_saturated_words_say_busy(viewer, site_queue):
    """A message claimed late while another was in flight: the page says the workers were busy,
    not that a claim took earlier messages (none came between)."""
    site_queue.configure_topic("orders")
    site_queue.publish("orders", "first")
    second = site_queue.publish("orders", "second")
    [d] = site_queue.claim("orders", 1)
    assert d.id != second
    due = int(site_queue.get("orders", second).due_at.timestamp() * 1000)
    poll(lambda: server_ms(site_queue) >= due + 60)
    assert [m.id for m in site_queue.claim("orders", 1)] == [second]
    page = viewer.get(reverse("delayq:message", args=["orders", "default", second])).content.decode()
    assert re.search(r'late \d+ ms: the workers were busy: messages in flight, or a claim after its due time took '
                     r'earlier ones<', page)


def test_finding_chart_title_counts_retries(viewer, site_queue):
    """The chart counts on-time retries (retry_backoff), and its title says so."""
    claimed_late(site_queue)
    page = viewer.get(reverse("delayq:topic_state", args=["orders", "default", "unacked"])).content.decode()
    assert "(over 10 ms past due, or a retry after its backoff)" in page
    assert "(over 10 ms)" not in page
