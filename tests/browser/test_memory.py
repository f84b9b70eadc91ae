"""Memory budgets in a real browser: a publish from the topic page's panel to a full topic says
so (507, swapped in by htmx) and writes nothing; the Memory page, reached from the topic page,
says the topic's size, its share and its budget in words."""

import pytest
from playwright.sync_api import expect

from tests.browser.test_accessibility import axe_blocking
from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_full_topic_refuses_the_publish_panel_and_the_memory_page_says_why(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders", max_messages=3)
    site_queue.publish_many("orders", ["x" * 100] * 3, delay=600)
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/")
    panel = page.get_by_test_id("publish-panel")
    panel.locator("summary").click()
    panel.locator("textarea[name=payload]").fill('{"n": 4}')
    panel.get_by_role("button", name="Publish").click()
    expect(page.get_by_test_id("publish-error")).to_contain_text("topic 'orders' is full: its max_messages budget is 3")
    assert site_queue.counts("orders")["pending"] == 3 and site_queue.counts("orders")["ready"] == 0
    page.get_by_test_id("memory-link").click()
    expect(page.locator("h1")).to_have_text("Redis memory of orders")
    expect(page.get_by_test_id("memory-size")).to_contain_text("3 messages take ~")
    expect(page.get_by_test_id("memory-budget")).to_contain_text("Budget: 3 messages (3 per partition; 3 stored)")
    expect(page.get_by_test_id("memory-growth")).to_contain_text("published")
    expect(page.get_by_test_id("memory-table")).to_contain_text("bytes per message (measured)")
    assert axe_blocking(page) == []   # no serious or critical accessibility violation, as for every page


def test_finding_budget_badge_shows_on_overview_and_topic_page(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders", max_messages=3)
    site_queue.publish_many("orders", ["x"] * 3, delay=600)
    site_queue.configure_topic("emails", max_messages=25)
    site_queue.publish_many("emails", ["x"] * 23, delay=600)
    log_in(page, base, user, password)
    expect(page.locator('tr[data-topic="orders"]').get_by_test_id("budget")).to_have_text("budget full")
    expect(page.locator('tr[data-topic="emails"]').get_by_test_id("budget")).to_have_text("92 % of budget")
    page.locator('tr[data-topic="emails"]').get_by_role("link", name="emails").click()
    expect(page.get_by_test_id("budget")).to_contain_text("92 % of budget")
    page.goto(f"{base}/topics/orders/")
    expect(page.get_by_test_id("budget")).to_contain_text("Publishing to orders is refused (TopicFull)")
    page.get_by_test_id("budget").get_by_role("link", name="budget full").click()
    expect(page.locator("h1")).to_have_text("Redis memory of orders")


def test_finding_memory_page_says_its_rate_window(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders", max_messages=100_000)
    site_queue.publish_many("orders", ["x"] * 10, delay=600)
    minutes = site_queue.keys("orders").g.minutes
    site_queue.redis.delete(minutes)
    sec, _ = site_queue.redis.time()
    site_queue.redis.hset(minutes, f"{int(sec) // 60 - 1}:published", 9000)   # a burst a minute ago
    site_queue.redis.hset(site_queue.keys("orders").g.stats, "published", 10 ** 6)   # history before the hour
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/memory/")
    expect(page.get_by_test_id("memory-growth")).to_contain_text("10.0/s published, 0.0/s acked over the last 15 minutes")
    expect(page.get_by_test_id("memory-window")).to_contain_text("averaged over the last 15 whole minutes")
    expect(page.get_by_test_id("memory-window")).to_contain_text("a one-off burst is spread over the window")
