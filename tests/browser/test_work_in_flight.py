"""Work in flight in a real browser: a worker's handler reports progress and log lines, the
message page shows them as they come (no reload), and the operator's Cancel stops the handler."""

import threading

import pytest
from playwright.sync_api import expect

from queue_core import Cancelled, MessageState, Worker
from tests.queue_core.test_cancel_running import running

from .test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_progress_shows_live_and_cancel_stops_the_handler(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("reports", visibility_timeout=60)
    step_two, stopped = threading.Event(), threading.Event()

    def handler(m):
        m.progress(0.2, "step 1/5")
        m.log("loaded the customers")
        step_two.wait(30)
        m.progress(0.6, "step 3/5")
        m.log("wrote 3 files")
        for _ in range(3000):   # 30 s of steps unless cancelled
            try:
                m.check_cancelled()
            except Cancelled:
                stopped.set()
                raise
            stopped.wait(0.01)
    mid = site_queue.publish("reports", "monthly")
    with running(Worker(site_queue, {"reports": handler}, concurrency=1)):
        log_in(page, base, user, password)
        page.goto(f"{base}/topics/reports/messages/{mid}/")
        expect(page.locator("[data-testid=progress]")).to_contain_text("20 %", timeout=5000)
        expect(page.locator("[data-testid=log]")).to_contain_text("loaded the customers")
        step_two.set()
        # No reload: the region's poll brings the next report within about a second.
        expect(page.locator("[data-testid=progress]")).to_contain_text("60 % · step 3/5", timeout=2500)
        expect(page.locator("[data-testid=log]")).to_contain_text("wrote 3 files")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel", exact=True).click()
        assert stopped.wait(3), "the handler was not told within 3 s"
    m = site_queue.get("reports", mid)
    assert m.state is MessageState.dead and m.last_error.message == "cancelled by user:olga"
    page.goto(f"{base}/topics/reports/messages/{mid}/")
    expect(page.locator("[data-testid=log]")).to_contain_text("wrote 3 files")   # kept with the dead letter
