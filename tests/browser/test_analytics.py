"""Late deliveries by cause on the Analytics page in a real browser (issue 38, point 1): the job's
late_causes output, written as the job writes it and loaded by the loader, stacked per minute by
cause with the totals in words, per topic and per consumer group."""

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from dashboard import analytics
from dashboard.models import AnalyticsRun, MinuteStat
from tests.dashboard.test_analytics import T, window, write_late_causes

from .test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_analytics_stacks_late_deliveries_by_cause(page, operator_login, site_queue, tmp_path,  # noqa: F811
                                                   artifacts):
    base, user, password = operator_login
    write_late_causes(tmp_path, [("orders", "default", T + timedelta(minutes=2), "key_held", 3, 700),
                                 ("orders", "default", T + timedelta(minutes=4), "no_worker", 2, 40),
                                 ("orders", "*", T + timedelta(minutes=2), "key_held", 3, 700),
                                 ("orders", "*", T + timedelta(minutes=4), "no_worker", 2, 40)])
    analytics.load_outputs(str(tmp_path), window(T.replace(hour=0)))
    for i in range(10):
        for group in ("*", "default"):
            MinuteStat.objects.create(topic="orders", group=group, minute=T + timedelta(minutes=i), delivered=10)
    AnalyticsRun.objects.create(status="done", active=False, late_causes=True)
    log_in(page, base, user, password)
    page.goto(f"{base}/analytics/")
    page.get_by_role("link", name="orders", exact=True).first.click()
    expect(page).to_have_url(f"{base}/analytics/topics/orders/?range=covered")
    expect(page.get_by_test_id("late-cause-totals")).to_contain_text("3 key held, 2 no worker")
    chart = page.get_by_test_id("lateness-causes")
    expect(chart).to_contain_text("Late deliveries per minute by cause (over 10 ms past due")
    expect(chart.locator("rect[data-series='key held']")).to_have_count(1)
    expect(chart.locator("rect[data-series='no worker']")).to_have_count(1)
    expect(chart.locator("rect[data-series='key held'] title")).to_have_text("12:02 key held: 3")
    page.screenshot(path=str(artifacts / "analytics-late-causes.png"), full_page=True)
    page.locator("a[data-group='default']").click()
    expect(page.get_by_test_id("analytics-group")).to_have_text("default")
    expect(page.get_by_test_id("late-cause-totals")).to_contain_text("3 key held, 2 no worker")
    page.goto(f"{base}/analytics/topics/emails/")
    expect(page.get_by_test_id("late-causes-empty")).to_contain_text("No late deliveries (over 10 ms) of emails")
