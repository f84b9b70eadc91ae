"""Live regions: every page that refreshes marks its regions with data-live (the URL live.js asks
again) instead of an htmx `every 5s` swap of the whole region, and that URL answers, for htmx,
the region with the same id, which live.js morphs in place (tests/browser/test_live.py)."""

import re

from django.urls import reverse


def live_regions(html: str) -> dict[str, str]:
    return {m.group(1): m.group(2).replace("&amp;", "&")
            for m in re.finditer(r'<section id="([\w-]+)"[^>]* data-live="([^"]*)"', html)}


def test_finding_refresh_swaps_whole_regions_pages_poll_through_live_js(viewer, site_queue):
    site_queue.publish("orders", "one")
    site_queue.heartbeat(["orders"], "web-1")
    pages = {
        reverse("delayq:overview"): {"summary"},
        reverse("delayq:workers"): {"workers"},
        reverse("delayq:topic_state", args=["orders", "default", "ready"]): {"counts", "messages"},
    }
    for url, expected in pages.items():
        html = viewer.get(url).content.decode()
        assert 'hx-trigger="every' not in html, url          # no whole-region swap on a timer
        assert "delayq/live.js" in html
        regions = live_regions(html)
        assert set(regions) == expected, url
        for region, live_url in regions.items():
            fragment = viewer.get(live_url or url, headers={"HX-Request": "true"}).content.decode()
            assert fragment.lstrip().startswith(f'<section id="{region}"'), (url, region)
            assert "<html" not in fragment


def test_finding_message_lists_never_refresh_the_messages_region_is_live(viewer, site_queue):
    site_queue.publish("orders", "one")
    tab = reverse("delayq:topic_state", args=["orders", "default", "ready"])
    html = viewer.get(tab + "?sort=oldest").content.decode()
    # The region follows the address bar's query (filters, sort, page), which htmx keeps current.
    assert f'data-live="{tab}" data-live-query' in html
    polled = viewer.get(tab + "?sort=oldest", headers={"HX-Request": "true"}).content.decode()
    assert 'id="messages"' in polled and 'data-id="' in polled


def test_finding_no_refresh_control_on_operation_and_analytics_pages_they_are_live_regions(viewer, site_queue):
    """The operation and analytics pages polled on their own timers (every 1 s and 2 s, whatever
    the refresh control said, and no control shown). Their panels are live regions now: live.js
    shows the control and refreshes them on the operator's interval, morphed in place."""
    from dashboard.models import AnalyticsRun, BulkOperation

    op = BulkOperation.objects.create(topic="orders", status="running", scope={"fingerprint": "", "since_ms": 0, "cutoff_ms": 0})
    AnalyticsRun.objects.create(status="running", active=True)
    pages = {reverse("delayq:operation", args=[op.pk]): {"operation"}, reverse("delayq:analytics"): {"analytics-run"}}
    for url, expected in pages.items():
        html = viewer.get(url).content.decode()
        assert "hx-trigger" not in html, url                 # no poller of its own
        regions = live_regions(html)
        assert set(regions) == expected, url
        for region, live_url in regions.items():
            fragment = viewer.get(live_url, headers={"HX-Request": "true"}).content.decode()
            assert fragment.lstrip().startswith(f'<section id="{region}"'), (url, region)
            assert 'data-status="running"' in fragment and "<svg" not in fragment
    op.status = "done"
    op.save()
    assert "operation" in live_regions(viewer.get(reverse("delayq:operation", args=[op.pk])).content.decode())
