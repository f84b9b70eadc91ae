"""The Schedules page in a real browser: reached from the main navigation, a schedule in words
with its next fire times, run now (confirmed) adding a tick that links to its message, and a
backfill previewed and run to 100 % as an operation by a real Celery worker."""

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture
from tests.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_schedules_page_runs_a_schedule_now(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("reports")
    site_queue.upsert_schedule("nightly-report", topic="reports", cron="0 3 * * 1-5", tz="Europe/Berlin")
    log_in(page, base, user, password)
    page.get_by_role("navigation").get_by_role("link", name="Schedules").click()
    expect(page.locator("h1")).to_have_text("Schedules")
    card = page.locator('article[data-schedule="nightly-report"]')
    expect(card.get_by_test_id("words")).to_have_text("Weekdays at 03:00 Europe/Berlin")
    expect(card.get_by_test_id("next").locator("time")).to_have_count(5)
    expect(card.get_by_role("button", name="Pause")).to_have_count(0)     # an operator may not pause
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Run now").click()
    row = page.locator('article[data-schedule="nightly-report"] tr[data-outcome="run-now"]')
    expect(row).to_have_count(1)
    expect(page.locator("body")).to_contain_text("Schedule nightly-report ran now")
    row.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"{base}/topics/reports/messages/[0-9A-Z.]+/"))


def test_backfill_is_previewed_and_runs_as_an_operation(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("webhooks")
    site_queue.upsert_schedule("poll", topic="webhooks", every=60)
    end_ms = site_queue.server_ms() // 60_000 * 60_000 - 60_000
    first_ms = end_ms - 29 * 60_000
    worker = start_worker(celery_env)
    try:
        log_in(page, base, user, password)
        page.get_by_test_id("live-interval").select_option("2")
        page.goto(f"{base}/schedules/")
        form = page.locator('article[data-schedule="poll"]').get_by_test_id("backfill")
        for field, ms in (("from", first_ms), ("to", end_ms)):
            form.locator(f"input[name={field}]").fill(datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
        form.get_by_role("button", name="Preview").click()
        expect(page.get_by_test_id("backfill-count")).to_have_text("30")
        expect(page.get_by_test_id("backfill-first").locator("li")).to_have_count(5)
        assert sum(site_queue.counts("webhooks").values()) == 0       # a preview publishes nothing
        page.fill("input[name=rate_limit]", "10")                      # ~3 s: running is seen on the way
        page.get_by_role("button", name="Backfill 30 ticks").click()
        expect(page.locator("h1")).to_contain_text("Backfill a schedule's ticks · operation #")
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-status")).to_have_text("done")
        expect(page.get_by_test_id("op-moved")).to_have_text("30")
    finally:
        worker.terminate()
        worker.wait(30)
    assert site_queue.counts("webhooks")["ready"] == 30
