"""Live refresh in a real browser: regions are morphed in place on the operator's interval (the
refresh control, remembered), so focus and an open panel survive refreshes, typing pauses them,
and message lists are live too."""

import pytest
from django.core.cache import cache
from playwright.sync_api import expect

from dashboard.models import AlertEvent, AlertRule, AnalyticsRun, BulkOperation, RetryPolicy, Topic
from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

REFRESH_WAIT_MS = 10_000   # a 2 s interval, with room for a slow machine


def choose_interval(page, seconds):
    page.get_by_test_id("live-interval").select_option(str(seconds))


def refreshes(page, region):
    return int(page.locator(region).get_attribute("data-refreshes") or 0)


def wait_for_refreshes(page, region, count):
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel).getAttribute('data-refreshes') || 0) >= n",
        arg=[region, count], timeout=REFRESH_WAIT_MS * count)


def orders_with_a_fired_alert(site_queue):
    """A topic with one message and a fired alert: the overview then has a Recent alerts panel."""
    orders = Topic.objects.create(name="orders", retry_policy=RetryPolicy.objects.create(name="p", jitter=0))
    rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0,
                                    email_to="ops@example.com")
    AlertEvent.objects.create(rule=rule, change=AlertEvent.Change.FIRING, summary="dead per hour fired")
    site_queue.publish("orders", "one")


def test_finding_refresh_drops_focus_and_closes_open_panels(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    orders_with_a_fired_alert(site_queue)
    log_in(page, base, user, password)
    choose_interval(page, 2)

    history = page.get_by_test_id("alert-history")
    history.locator("summary").click()
    expect(history).to_have_attribute("open", "")
    link = page.locator('tr[data-topic="orders"] th a').first
    link.focus()
    ready = page.locator('tr[data-topic="orders"] td[data-state="ready"]')
    expect(ready).to_have_text("1")

    site_queue.publish("orders", "two")
    wait_for_refreshes(page, "#summary", 3)
    expect(ready).to_have_text("2")   # the numbers did change in place
    expect(history).to_have_attribute("open", "")
    assert page.evaluate("document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.topic") == "orders"
    expect(page.get_by_test_id("live-announce")).to_contain_text("ready 1 -> 2")


def test_finding_no_refresh_control_the_choice_survives_a_reload(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    log_in(page, base, user, password)
    expect(page.get_by_test_id("live-interval")).to_have_value("5")   # the default
    choose_interval(page, 15)
    page.reload()
    expect(page.get_by_test_id("live-interval")).to_have_value("15")
    choose_interval(page, 0)
    page.goto(f"{base}/workers/")
    expect(page.get_by_test_id("live-interval")).to_have_value("0")
    expect(page.get_by_test_id("live-control")).to_have_attribute("data-live", "off")


def test_finding_refresh_while_typing_it_pauses(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.publish("orders", "one")
    log_in(page, base, user, password)
    choose_interval(page, 2)
    wait_for_refreshes(page, "#summary", 1)
    search = page.get_by_test_id("topic-search")
    search.click()
    search.type("ord")
    expect(page.get_by_test_id("live-control")).to_have_attribute("data-live", "paused", timeout=REFRESH_WAIT_MS)
    expect(page.get_by_test_id("live-status")).to_have_text("paused while you type")
    paused_at = refreshes(page, "#summary")
    page.wait_for_timeout(5_000)   # more than two intervals: a refresh would have come
    assert refreshes(page, "#summary") == paused_at
    expect(search).to_have_value("ord")
    search.blur()
    wait_for_refreshes(page, "#summary", paused_at + 1)


def test_finding_message_lists_never_refresh(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.publish("orders", "first")
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/default/ready/")
    choose_interval(page, 2)
    rows = page.locator("#messages tr[data-id]")
    expect(rows).to_have_count(1)
    site_queue.publish("orders", "second")
    expect(rows).to_have_count(2, timeout=REFRESH_WAIT_MS)
    expect(page.get_by_test_id("live-announce")).to_contain_text("1 new message", timeout=REFRESH_WAIT_MS)


def test_finding_r_reloads_the_whole_overview_and_workers_page(page, operator_login, site_queue):  # noqa: F811
    """`r` asks live.js for a refresh now (the delayq:refresh event): the figures change in place,
    the page is not reloaded, focus and an open panel stay. It reloaded the whole page here."""
    base, user, password = operator_login
    orders_with_a_fired_alert(site_queue)
    log_in(page, base, user, password)
    choose_interval(page, 0)                   # no timer: only r refreshes
    page.evaluate("window.notReloaded = true")
    history = page.get_by_test_id("alert-history")
    history.locator("summary").click()
    link = page.locator('tr[data-topic="orders"] th a').first
    link.focus()
    ready = page.locator('tr[data-topic="orders"] td[data-state="ready"]')
    expect(ready).to_have_text("1")
    site_queue.publish("orders", "two")
    cache.clear()                               # the summaries' one-second cache
    page.keyboard.press("r")
    wait_for_refreshes(page, "#summary", 1)
    expect(ready).to_have_text("2")
    assert page.evaluate("window.notReloaded === true")
    expect(history).to_have_attribute("open", "")
    expect(link).to_be_focused()

    site_queue.heartbeat(["orders"], "web-1")
    page.goto(f"{base}/workers/")
    page.evaluate("window.notReloaded = true")
    expect(page.locator('tr[data-worker="web-1"]')).to_have_count(1)
    sort = page.locator("#workers p.filters a").first
    sort.focus()
    site_queue.heartbeat(["orders"], "web-2")
    page.keyboard.press("r")
    wait_for_refreshes(page, "#workers", 1)
    expect(page.locator('tr[data-worker="web-2"]')).to_have_count(1)
    assert page.evaluate("window.notReloaded === true")
    expect(sort).to_be_focused()


def test_finding_no_refresh_control_on_the_operation_and_analytics_pages(page, operator_login, site_queue):  # noqa: F811
    """Both pages polled on timers of their own (1 s, 2 s) with no control. They show the control
    now, with the interval chosen on another page, and refresh on it; off is off."""
    base, user, password = operator_login
    op = BulkOperation.objects.create(topic="orders", status="running", total=10,
                                      scope={"fingerprint": "", "since_ms": 0, "cutoff_ms": 0})
    run = AnalyticsRun.objects.create(status="running", active=True)
    log_in(page, base, user, password)
    choose_interval(page, 2)

    page.goto(f"{base}/operations/{op.pk}/")
    expect(page.get_by_test_id("live-interval")).to_have_value("2")      # remembered from the overview
    BulkOperation.objects.filter(pk=op.pk).update(moved=7)
    expect(page.get_by_test_id("op-moved")).to_have_text("7", timeout=REFRESH_WAIT_MS)
    choose_interval(page, 0)
    expect(page.get_by_test_id("live-control")).to_have_attribute("data-live", "off")
    stopped_at = refreshes(page, "#operation")
    BulkOperation.objects.filter(pk=op.pk).update(moved=9)
    page.wait_for_timeout(5_000)                                        # two intervals of the old choice
    assert refreshes(page, "#operation") == stopped_at
    expect(page.get_by_test_id("op-moved")).to_have_text("7")

    page.goto(f"{base}/analytics/")
    expect(page.get_by_test_id("live-interval")).to_have_value("0")
    expect(page.locator("#analytics-run")).to_have_attribute("data-status", "running")
    page.evaluate("window.notReloaded = true")
    choose_interval(page, 2)
    wait_for_refreshes(page, "#analytics-run", 1)
    assert page.evaluate("window.notReloaded === true")                 # a running run: the panel only
    AnalyticsRun.objects.filter(pk=run.pk).update(status="done", active=False)
    # the refresh that sees the watched run finish reloads the page, for the charts it wrote
    expect(page.locator("#analytics-run")).to_have_attribute("data-status", "done", timeout=REFRESH_WAIT_MS)
    page.wait_for_function("window.notReloaded === undefined", timeout=REFRESH_WAIT_MS)
    expect(page.get_by_test_id("live-control")).to_be_visible()
