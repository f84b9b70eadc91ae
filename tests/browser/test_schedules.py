"""The Schedules page in a real browser: reached from the main navigation, a schedule in words
with its next fire times, and run now (confirmed) adding a tick that links to its message."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

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
