"""Canary replay in a real browser: the preview's canary thresholds, and the operation page showing
the canary's outcome live while a real Celery worker runs the replay and a delayq Worker consumes it
(a fixed handler: the canary passes and the rest follows)."""

import threading

import pytest
from playwright.sync_api import expect

from queue_core import Worker
from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture
from tests.conftest import start_worker
from tests.dashboard.test_canary import failed_canary_operation
from tests.dashboard.test_pages import kill

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_canary_outcome_is_shown_live_on_the_operation_page(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    kill(site_queue, "orders", [str(i) for i in range(60)])
    consumer = Worker(site_queue, {"orders": lambda m: None}, concurrency=4, idle_wait=0.2)
    thread = threading.Thread(target=consumer.run, kwargs={"install_signal_handlers": False}, daemon=True)
    celery = start_worker(celery_env)
    try:
        log_in(page, base, user, password)
        page.get_by_test_id("live-interval").select_option("2")
        page.goto(f"{base}/topics/orders/default/dead/")
        page.get_by_role("link", name="Replay all matching…").first.click()
        expect(page.get_by_test_id("replay-count")).to_have_text("60")
        page.get_by_test_id("canary-on").check()
        page.get_by_label("canary wait in seconds").fill("120")
        page.fill("input[name=rate_limit]", "10")                 # the rest takes ~4 s: seen running
        page.get_by_test_id("replay-confirm").click()
        expect(page.get_by_test_id("canary-plan")).to_contain_text("Replay the first 20")
        # Nobody consumes yet: the canary waits, in flight, and the page says so.
        expect(page.get_by_test_id("canary-replayed")).to_have_text("20", timeout=20_000)
        expect(page.get_by_test_id("canary-verdict")).to_contain_text("watching until")
        thread.start()                                            # the fixed handler is deployed
        expect(page.get_by_test_id("canary-acked")).to_have_text("20", timeout=20_000)
        expect(page.get_by_test_id("canary-verdict")).to_contain_text("passed: 20 of 20 acked (100 %)")
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-moved")).to_have_text("60")
    finally:
        consumer.stop()
        if thread.is_alive():
            thread.join(15)
        celery.terminate()
        celery.wait(30)


def test_finding_failed_canary_page_offers_no_resume(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    op = failed_canary_operation(kill(site_queue, "orders", [str(i) for i in range(10)]))
    log_in(page, base, user, password)
    page.goto(f"{base}/operations/{op.pk}/")
    expect(page.get_by_test_id("canary-verdict")).to_contain_text("failed")
    expect(page.get_by_test_id("op-no-resume")).to_contain_text("the rest of its dead letters stay dead, untouched")
    expect(page.get_by_role("button", name="Resume")).to_have_count(0)
