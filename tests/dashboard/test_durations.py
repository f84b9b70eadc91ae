"""Durations in words wherever the console shows them (14 d, not 1209600.0)."""

import pytest
from django.urls import reverse

from dashboard.durations import in_words

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("seconds, words", [
    (1209600.0, "14 d"), (30.0, "30 s"), (0.5, "500 ms"), (5400, "1 h 30 min"), (None, "—"), ("", "—"),
    (0, "0 s"), ("abc", "abc"), (float("inf"), "inf"),
])
def test_in_words(seconds, words):
    assert in_words(seconds) == words


def test_finding_durations_in_raw_seconds_on_the_topic_and_message_pages(viewer, site_queue):
    site_queue.configure_topic("orders", visibility_timeout=45, dead_max_age=14 * 86400)
    site_queue.configure_group("orders", "ship", ttl=7200)
    msg_id = site_queue.publish("orders", "x")
    page = viewer.get(reverse("delayq:topic", args=["orders"])).content.decode()
    assert "<td>45 s</td>" in page and "for 14 d</td>" in page and "1209600" not in page
    message = viewer.get(reverse("delayq:message", args=["orders", "ship", msg_id])).content.decode()
    assert 'data-testid="ttl">2 h (the group\'s default)' in message and "7200" not in message


def test_no_age_limit_is_said_in_words(viewer, site_queue):
    site_queue.configure_topic("orders", dead_max_age=0)
    page = viewer.get(reverse("delayq:topic", args=["orders"])).content.decode()
    assert "messages, with no age limit</td>" in page
