"""Work in flight in a real browser: a worker's handler reports progress and log lines, the
message page shows them as they come (no reload, within 1 s of the handler's call), and the
operator's Cancel stops the handler."""

import threading
import time

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
    reported = {}

    def handler(m):
        m.progress(0.2, "step 1/5")
        m.log("loaded the customers")
        step_two.wait(30)
        reported["at"] = time.time()   # the wall clock the browser's Date.now() reads too
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
        # No reload: the worker reports within 0.5 s of the call, the region's poll (every 0.5 s)
        # brings it. The page notes when it first shows the report (not when a poll of the test
        # happens to look), and that must be within 1 s of the handler's call.
        page.evaluate("""() => {
          const shown = () => ((document.querySelector('[data-testid=progress]') || {}).textContent || '')
            .replace(/\\s+/g, ' ');
          new MutationObserver(() => {
            if (window.shownAt === undefined && shown().includes('60 % · step 3/5')) window.shownAt = Date.now();
          }).observe(document.body, {childList: true, subtree: true, characterData: true});
        }""")
        step_two.set()
        shown_at = page.wait_for_function("() => window.shownAt", timeout=5000).json_value() / 1000
        lag = shown_at - reported["at"]
        assert 0 <= lag <= 1.0, f"the progress showed {lag:.3f} s after the handler's call (at most 1 s)"
        expect(page.locator("[data-testid=progress]")).to_contain_text("60 % · step 3/5")
        expect(page.locator("[data-testid=log]")).to_contain_text("wrote 3 files")
        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel", exact=True).click()
        assert stopped.wait(3), "the handler was not told within 3 s"
    m = site_queue.get("reports", mid)
    assert m.state is MessageState.dead and m.last_error.message == "cancelled by user:olga"
    page.goto(f"{base}/topics/reports/messages/{mid}/")
    expect(page.locator("[data-testid=log]")).to_contain_text("wrote 3 files")   # kept with the dead letter
