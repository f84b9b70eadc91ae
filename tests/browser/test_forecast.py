"""The due-load forecast and spread in a real browser: reached from the topic page, the hour / day /
week buttons, the peaks in words, then "spread" previewed and run to 100 % by a real Celery worker."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture
from tests.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_forecast_shows_the_peaks_and_spread_flattens_them(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders")
    ids = site_queue.publish_many("orders", [str(i) for i in range(120)], delay=150)   # one peak, within the window
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/")
    page.get_by_test_id("forecast-link").click()
    expect(page.locator("h1")).to_have_text("Due-load forecast of orders / default")
    expect(page.locator("svg.chart")).to_have_count(1)
    expect(page.get_by_test_id("peaks")).to_contain_text("120 due in one minute")
    page.get_by_test_id("view-day").click()
    expect(page).to_have_url(re.compile(r"view=day$"))
    expect(page.get_by_test_id("peaks")).to_contain_text("120 due in 15 minutes")
    page.get_by_test_id("view-week").click()
    expect(page.get_by_test_id("peaks")).to_contain_text("120 due in one hour")
    form = page.get_by_test_id("spread-form")
    form.locator("input[name=minutes]").fill("20")
    form.get_by_role("button", name="Spread…").click()
    expect(page.get_by_test_id("spread-count")).to_have_text("120")
    expect(page.get_by_test_id("samples").locator("li")).to_have_count(5)
    expect(page.get_by_test_id("scope")).to_contain_text("spaced evenly in due order over 20 min")
    worker = start_worker(celery_env)
    try:
        page.get_by_test_id("spread-confirm").click()
        expect(page.locator("h1")).to_contain_text("Spread pending messages over a window · operation #")
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-moved")).to_have_text("120")
    finally:
        worker.terminate()
        worker.wait(30)
    dues = sorted(site_queue.get("orders", m).due_at for m in ids)
    # The last takes the window's last slot; the first few keep their own due time (their slots,
    # in the first 150 s of the window, are earlier): none was made due earlier.
    assert 20 * 60 * 119 / 120 - 150 <= (dues[-1] - dues[0]).total_seconds() <= 20 * 60 * 119 / 120 + 0.01
    page.goto(f"{base}/topics/orders/default/forecast/")
    expect(page.get_by_test_id("peaks")).not_to_contain_text("120 due")    # flattened: no bucket holds them all
