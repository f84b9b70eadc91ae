"""The due-load forecast page (views_forecast.forecast): a chart per group with hour / day / week
views, the drain rate, the peaks in words with their expected lateness; read-only for viewers."""

import pytest
from django.urls import reverse

from dashboard.services.forecast import Peak, peak_words

pytestmark = pytest.mark.django_db


def test_forecast_page_charts_what_falls_due_and_names_the_peaks(viewer, site_queue):
    site_queue.publish_many("orders", ["x"] * 7, delay=20 * 60 + 30)
    site_queue.publish_many("orders", ["y"] * 2, delay=5 * 60 + 30)
    site_queue.publish("orders", "later", delay=3 * 3600)
    url = reverse("delayq:forecast", args=["orders", "default"])
    page = viewer.get(url).content.decode()
    assert '<svg class="chart"' in page and "Messages falling due per 1 min" in page
    assert page.index(": 2 due in one minute") < page.index(": 7 due in one minute")   # the peaks in time order
    assert "no acks in the last hour" in page and "1 due after this range" in page
    assert 'data-testid="spread-form"' not in page                          # a viewer may not spread
    day = viewer.get(url + "?view=day").content.decode()
    # Buckets start on whole quarter hours: 5.5 and 20.5 minutes ahead, 15 minutes apart, fall in two.
    assert "Messages falling due per 15 min" in day and ": 2 due in 15 minutes" in day and ": 7 due in 15 minutes" in day
    week = viewer.get(url + "?view=week").content.decode()
    # On the hour: both in one hour, or (when an hour ends between them) one each side.
    assert "per 1 h" in week and ": 10 due in one hour" not in week
    assert ": 9 due in one hour" in week or (": 2 due in one hour" in week and ": 7 due in one hour" in week)


def test_forecast_page_refuses_an_unknown_view_and_unknown_groups(viewer, site_queue):
    site_queue.publish("orders", "x", delay=60)
    bad = viewer.get(reverse("delayq:forecast", args=["orders", "default"]) + "?view=year")
    assert bad.status_code == 400 and b"use hour, day or week" in bad.content
    assert viewer.get(reverse("delayq:forecast", args=["orders", "nope"])).status_code == 404


def test_forecast_page_says_the_drain_rate_and_offers_spread_to_operators(operator, site_queue):
    site_queue.publish_many("orders", ["a"] * 3)
    site_queue.ack_many(site_queue.claim("orders", 3))          # 3 acks this minute: a drain rate
    site_queue.publish_many("orders", ["b"] * 500, delay=90)
    page = operator.get(reverse("delayq:forecast", args=["orders", "default"])).content.decode()
    assert "Drain rate: <strong>0.1/s</strong>" in page and "drained at the busiest minute" in page
    # 3 a minute drain 3 of the 500 in their minute: the last waits 497 / 0.05 s = 2.8 h.
    assert ": 500 due in one minute; at 0.05/s the last is ~2.8 h late" in page
    assert 'data-testid="spread-form"' in page


def test_peak_words_say_how_late_the_last_one_is():
    peak = Peak(at_ms=1_795_683_600_000, count=1_200_000, late_s=80)
    assert peak_words(peak, 15_000, 1000) == "2026-11-26 09:00:00 UTC: 1.2 M due in one second; at 15k/s the last is ~80 s late"
    assert peak_words(Peak(0, 10, 0.2), 100, 60_000).endswith("at 100/s they are drained in time")
    assert peak_words(Peak(0, 10, float("inf")), 0, 60_000).endswith("no drain rate to judge it by")


def test_forecast_page_warns_when_nothing_drains_the_group(viewer, site_queue):
    """A new operator read "drained in time" with no worker running: the page now says when no
    worker is claiming the group, or when it is paused, that nothing drains until then."""
    site_queue.publish("orders", "x", delay=60)
    url = reverse("delayq:forecast", args=["orders", "default"])
    assert "No worker is claiming this group now" in viewer.get(url).content.decode()
    site_queue.heartbeat(["orders"], "worker-1")
    assert 'data-testid="drain-warning"' not in viewer.get(url).content.decode()
    site_queue.pause("orders")
    assert "This group is paused" in viewer.get(url).content.decode()
