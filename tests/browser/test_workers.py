"""The Workers page in a real browser: reached from the main navigation, a live worker's row with
its details, and a group without a worker named and linked to its page."""

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_workers_page_from_the_navigation(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders")
    site_queue.configure_group("orders", "billing")
    site_queue.heartbeat(["orders"], "web-1", details={"host": "box-1", "pid": 4242, "runtime": "threads",
                                                       "concurrency": 8, "in_flight": 2, "version": "0.1.0"})
    log_in(page, base, user, password)
    page.get_by_role("navigation").get_by_role("link", name="Workers").click()
    expect(page.locator("h1")).to_have_text("Workers")
    row = page.locator('tr[data-worker="web-1"]')
    expect(row).to_contain_text("box-1")
    expect(row).to_contain_text("4242")
    page.get_by_test_id("unattended").get_by_role("link", name="orders / billing").click()
    expect(page).to_have_url(f"{base}/topics/orders/billing/ready/")


def test_finding_in_flight_and_unacked_are_told_apart(page, operator_login, site_queue):  # noqa: F811
    from tests.queue_core.helpers import poll

    base, user, password = operator_login
    site_queue.configure_topic("orders", visibility_timeout=0.5)
    site_queue.publish_many("orders", ["a", "b", "c"])
    site_queue.claim("orders", 3)              # a worker that died with them: no settle, no heartbeat now
    site_queue.heartbeat(["orders"], "web-1", details={"host": "box-1", "pid": 1, "runtime": "threads",
                                                       "concurrency": 8, "in_flight": 0, "version": "0.1.0"})
    poll(lambda: site_queue.lease_counts([("orders", "default")])[("orders", "default")] == (3, 3), timeout=5)
    log_in(page, base, user, password)
    page.goto(f"{base}/workers/")
    expect(page.get_by_test_id("workers-summary")).to_contain_text("0 messages in flight")
    expect(page.get_by_test_id("in-flight-note")).to_contain_text("also holds messages whose lease ran out")
    row = page.get_by_test_id("leases").locator('tr[data-topic="orders"][data-group="default"]')
    expect(row.locator("td").first).to_have_text("3")
    expect(row.get_by_test_id("expired")).to_have_text("3")
    row.get_by_role("link", name="orders / default").click()
    expect(page).to_have_url(f"{base}/topics/orders/default/unacked/")
