"""Why a delivery was late, in a real browser (issue 38, point 1): the message page says the cause
in words and links the message that held its ordering key; the topic page stacks the late
deliveries by cause per minute."""

import re

import pytest
from playwright.sync_api import expect

from tests.queue_core.helpers import poll, server_ms

from .test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def late_behind_its_key(q):
    """One message claimed 50 ms late with no worker claiming; then two messages of one ordering
    key, the first acked 300 ms after both were due, so the second is claimed late, held by it."""
    q.configure_topic("late")
    q.configure_group("late", "default", ordered=True)
    lone = q.publish("late", "0", order_key="acct-0")
    due = int(q.get("late", lone).due_at.timestamp() * 1000)
    poll(lambda: server_ms(q) >= due + 50)
    assert [d.id for d in q.claim("late", 1)] == [lone]
    first = q.publish("late", "1", order_key="acct-1")
    second = q.publish("late", "2", order_key="acct-1")
    [d] = q.claim("late", 5)
    poll(lambda: server_ms(q) >= d.due_ms + 300)
    q.ack(d)
    [d2] = q.claim("late", 5)
    assert d2.id == second
    return first, second, lone


def test_message_page_says_why_and_topic_page_stacks_causes(page, operator_login, site_queue,  # noqa: F811
                                                            artifacts):
    base, user, password = operator_login
    first, second, lone = late_behind_its_key(site_queue)
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/late/default/messages/{second}/")
    cause = page.get_by_test_id("lateness-cause")
    expect(cause).to_contain_text("the ordering key was held by")
    expect(cause).to_have_text(re.compile(r"^late (\d{3} ms|\d+\.\d s): the ordering key was held by " + first + r"\s*$"))
    page.screenshot(path=str(artifacts / "message-lateness.png"), full_page=True)
    cause.locator("a").click()
    expect(page).to_have_url(f"{base}/topics/late/default/messages/{first}/")
    page.goto(f"{base}/topics/late/default/messages/{lone}/")
    expect(page.get_by_test_id("lateness-cause")).to_contain_text("no worker was claiming")
    page.goto(f"{base}/topics/late/default/unacked/")
    chart = page.get_by_test_id("lateness-causes")
    expect(chart).to_contain_text("key held 1")
    expect(chart).to_contain_text("no worker 1")
    expect(chart.locator("rect[data-series='key held']")).to_have_count(1)
    expect(chart.locator("rect[data-series='no worker']")).to_have_count(1)
    page.screenshot(path=str(artifacts / "topic-lateness-causes.png"), full_page=True)


def test_finding_chart_legend_keys_wrap_whole_at_1280(page, operator_login, site_queue):  # noqa: F811
    """At 1280 px the three minute charts share a row: a legend key broke between its swatch and
    its words ("saturated" a line below its colour). Each key now stays on one line."""
    base, user, password = operator_login
    site_queue.publish("orders", "x")
    minute = server_ms(site_queue) // 60_000
    site_queue.redis.hset(site_queue.keys("orders").g.minutes, mapping={
        f"{minute - 2}:cause:{c}": 1 + i for i, c in enumerate(
            ("key_held", "paused", "rate_limited", "concurrency_limited", "saturated", "no_worker", "retry_backoff"))})
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/default/ready/")
    expect(page.get_by_test_id("lateness-causes")).to_contain_text("saturated 5")
    lines = page.evaluate("[...document.querySelectorAll('.legend .key')].map(k => [k.textContent, "
                          "k.getClientRects().length])")
    assert len(lines) >= 10 and all(n == 1 for _text, n in lines), lines
    for key in page.locator(".legend .key").all():                      # the swatch on its words' line
        swatch_top = key.evaluate("k => k.getBoundingClientRect().top")
        assert key.bounding_box()["height"] < 30 and swatch_top == key.bounding_box()["y"]
