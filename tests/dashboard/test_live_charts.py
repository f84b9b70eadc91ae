"""Live charts from the engine's per-minute counters: a sparkline per topic and group on the
overview (read in the overview's one pipeline) and the topic page's throughput and lateness charts
of the last hour, inside the region its live refresh redraws."""

import re
import time

import pytest
from django.core.cache import cache
from django.urls import reverse
from redis.connection import Connection

from dashboard.charts import SPARK_STEP, spark_path, sparkline
from queue_core import RetryPolicy

pytestmark = pytest.mark.django_db


def _settle(q, topic):
    """3 published, 1 acked, 1 dead (one attempt allowed) in the default group, all in one minute
    of Redis's clock with time to read the page in it (a minute turning over mid-test split them)."""
    deadline = time.monotonic() + 10
    while q.redis.time()[0] % 60 > 50 and time.monotonic() < deadline:
        time.sleep(0.1)   # polling Redis's clock for the next minute, not guessing
    q.configure_topic(topic, retry=RetryPolicy.fixed(0, max_attempts=1))
    q.publish_many(topic, [b"a", b"b", b"c"])
    first, second = q.claim(topic, 2)
    q.ack(first)
    q.nack(second, "boom")


def _path_points(d):
    """The y of each minute of a sparkline's compact path (M x y, then h dx / l dx dy steps of
    charts.SPARK_STEP px a minute)."""
    ys = []
    for command, args in re.findall(r"([MhlL])([^MhlL]*)", d):
        numbers = [int(n) for n in args.split()]
        if command == "M":
            ys.append(numbers[1])
        elif command == "h":
            ys.extend([ys[-1]] * (numbers[0] // SPARK_STEP))
        else:
            assert numbers[0] == SPARK_STEP, d
            ys.append(ys[-1] + numbers[1])
    return ys


def _sparklines(html):
    """{aria-label: {event: [y of each minute]}} of every sparkline on a page."""
    found = {}
    for label, body in re.findall(r'<svg class="spark"[^>]*aria-label="([^"]*)"[^>]*>(.*?)</svg>', html, re.S):
        found[label] = {event: _path_points(d) for event, d in re.findall(r'data-event="(\w+)" d="([^"]*)"', body)}
    return found


def test_finding_no_live_charts_overview_has_a_sparkline_per_topic_and_group(viewer, site_queue):
    """Each topic row, and each group row of an opened topic, draws published, acked and dead per
    minute over the last 60 minutes, with the hour's totals in words."""
    _settle(site_queue, "orders")
    site_queue.configure_group("orders", "audit")
    site_queue.publish("quiet", b"x")
    html = viewer.get(reverse("delayq:overview") + "?open=orders").content.decode()
    lines = _sparklines(html)
    assert set(lines) == {"orders, last 60 minutes: 3 published, 1 acked, 1 dead",
                          "orders/default, last 60 minutes: 3 published, 1 acked, 1 dead",
                          "orders/audit, last 60 minutes: 0 published, 0 acked, 0 dead",
                          "quiet, last 60 minutes: 1 published, 0 acked, 0 dead"}, lines
    assert all({e: len(ys) for e, ys in points.items()} == {"published": 60, "acked": 60, "dead": 60}
               for points in lines.values())
    # this minute's 3 published reach the top (y 1); every earlier minute lies on the floor (y 23)
    assert lines["orders, last 60 minutes: 3 published, 1 acked, 1 dead"]["published"] == [23] * 59 + [1]
    assert lines["orders/audit, last 60 minutes: 0 published, 0 acked, 0 dead"]["dead"] == [23] * 60
    assert 'title="published, acked and dead per minute over the last hour">last hour</th>' in html


def test_finding_no_live_charts_overview_sparklines_refresh_with_the_summary(viewer, site_queue):
    """The htmx poll of the summary region carries the sparklines, with what happened since."""
    site_queue.publish("orders", b"a")
    viewer.get(reverse("delayq:overview"))
    site_queue.publish("orders", b"b")
    cache.clear()   # the summaries' one-second cache
    html = viewer.get(reverse("delayq:overview"), headers={"HX-Request": "true"}).content.decode()
    assert list(_sparklines(html)) == ["orders, last 60 minutes: 2 published, 0 acked, 0 dead"]


def test_finding_no_live_charts_overview_round_trips_do_not_grow_per_topic(viewer, site_queue, monkeypatch):
    """The sparklines ride in the summaries' pipeline: a page of 5 topics (2 groups each) costs
    the same Redis round trips as a page of 1."""
    for n in range(5):
        _settle(site_queue, f"t-{n}")
        site_queue.configure_group(f"t-{n}", "audit")
    sends = []
    original = Connection.send_packed_command

    def counted(self, command, *args, **kwargs):
        sends.append(1)
        return original(self, command, *args, **kwargs)

    def round_trips(search):
        cache.clear()
        viewer.get(reverse("delayq:overview") + f"?q={search}")   # layouts and scripts loaded
        cache.clear()
        monkeypatch.setattr(Connection, "send_packed_command", counted)
        sends.clear()
        html = viewer.get(reverse("delayq:overview") + f"?q={search}").content.decode()
        monkeypatch.setattr(Connection, "send_packed_command", original)
        return len(sends), len(_sparklines(html))

    one, lines_one = round_trips("t-0")
    five, lines_five = round_trips("t-")
    assert (lines_one, lines_five) == (1, 5)
    assert 0 < one == five, (one, five)


def test_finding_no_live_charts_topic_page_draws_throughput_and_lateness(viewer, site_queue):
    """The topic page's counts region (the one its live refresh redraws) holds two charts of the
    group's last hour: published/acked/dead per minute over 60 points, and lateness p50/p99."""
    _settle(site_queue, "orders")
    for url in (reverse("delayq:topic_state", args=["orders", "default", "ready"]),
                reverse("delayq:topic_state", args=["orders", "default", "ready"]) + "?region=counts"):
        cache.clear()
        html = viewer.get(url, headers={"HX-Request": "true"} if "region" in url else {}).content.decode()
        charts = re.search(r'<div class="minute-charts" data-testid="minute-charts">(.*?)</div>', html, re.S)
        assert charts, url
        throughput, lateness = re.findall(r'<svg class="chart".*?</svg>', charts.group(1), re.S)
        assert 'aria-label="Throughput per minute, last hour"' in throughput
        lines = re.findall(r'<polyline class="s\d" points="([^"]*)"', throughput)
        assert [len(p.split()) for p in lines] == [60, 60, 60]
        assert "Claim lateness per minute" in lateness
        # two claims in one minute: p50 and p99 are one point each, the other minutes have none
        assert len(re.findall(r'<circle class="s[12]"', lateness)) == 2 or len(re.findall(r"<polyline", lateness)) == 2


def test_topic_page_charts_say_when_the_hour_was_quiet(viewer, site_queue):
    site_queue.publish("orders", b"a", delay=3600)
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "default", "pending"])).content.decode()
    assert "Claim lateness per minute, last hour (above 60 s drawn at 60 s): no data in this range." in html


def test_finding_overview_over_150ms_sparklines_are_compact_paths():
    """bench.dashboard's overview with every topic expanded (150 group rows) took 159.5 ms and
    671 KiB, most of it polylines of 60 points with decimals. A sparkline is now one compact path
    per event: whole pixels, relative steps, a run of equal minutes as one segment."""
    quiet = {"published": [0] * 59 + [3], "acked": [0] * 60, "dead": [0] * 60}
    assert len(sparkline(quiet, label="shop0001/billing")) < 500           # was 2,173 bytes
    busy = {e: [(i * 37 + k * 11) % 500 for i in range(60)] for k, e in enumerate(("published", "acked", "dead"))}
    svg = sparkline(busy, label="shop0001/billing")
    assert len(svg) < 1400                                                   # was 2,117 bytes
    top = max(max(v) for v in busy.values())
    for event, values in busy.items():
        d = re.search(rf'data-event="{event}" d="([^"]*)"', svg).group(1)
        assert _path_points(d) == [23 - round(v * 22 / top) for v in values]   # every minute, to the pixel
    assert spark_path([0] * 60, 1) == "M0 23h118"
