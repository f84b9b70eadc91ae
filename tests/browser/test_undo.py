"""Undo in a real browser: a "kill all" run by a real Celery worker, the operation's page saying
until when it can be undone, the Undo button starting an undo operation (run by the worker too)
that puts every message back in retrying, and the Operations page then saying it can no longer be
undone."""

import pytest
from playwright.sync_api import expect

from dashboard.models import BulkOperation
from queue_core import MessageState, RetryPolicy
from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture
from tests.conftest import start_worker

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_kill_all_is_undone_from_its_operation_page(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("orders", retry=RetryPolicy.fixed(3600, max_attempts=5))
    site_queue.publish_many("orders", [str(i) for i in range(40)])
    for d in site_queue.claim("orders", 40):
        site_queue.nack(d, "boom")
    celery = start_worker(celery_env)
    try:
        log_in(page, base, user, password)
        page.goto(f"{base}/topics/orders/default/retrying/all/kill/")
        page.get_by_test_id("bulk-confirm").click()
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-moved")).to_have_text("40")
        assert site_queue.counts("orders")[MessageState.dead] == 40
        page.reload()
        expect(page.get_by_test_id("op-undo-until")).to_contain_text("can be undone until")
        page.once("dialog", lambda d: d.accept())                # it asks first (test_finding_undo_asks_first_*)
        page.get_by_test_id("op-undo").click()                   # a POST with the CSRF token
        expect(page.locator("h1")).to_contain_text("Undo an operation")
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-moved")).to_have_text("40")
        counts = site_queue.counts("orders")
        assert (counts[MessageState.retrying], counts[MessageState.dead]) == (40, 0)
        page.goto(f"{base}/operations/")
        expect(page.get_by_test_id("op-undo-until")).to_contain_text("can no longer be undone")
        expect(page.get_by_test_id("op-undo")).to_have_count(0)
    finally:
        celery.terminate()
        celery.wait(30)


def killed_all(site_queue, n: int) -> BulkOperation:
    """A kill-all operation of ``n`` retrying messages as its run leaves it (services/operations.
    kill_batch holds what it kills for undo), without a Celery worker."""
    site_queue.configure_topic("orders", retry=RetryPolicy.fixed(3600, max_attempts=5))
    site_queue.publish_many("orders", [str(i) for i in range(n)])
    ids = []
    for d in site_queue.claim("orders", n):
        site_queue.nack(d, "boom")
        ids.append(d.id)
    op = BulkOperation.objects.create(action="kill", topic="orders", status="done", total=n, moved=n,
                                      scope={"group": "default", "state": "retrying", "cutoff_ms": 2 ** 41})
    site_queue.kill_many("orders", ids, hold=f"op-{op.pk}")
    return op


def test_finding_undo_asks_first_saying_how_many_go_back_where(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    op = killed_all(site_queue, 7)
    log_in(page, base, user, password)
    page.goto(f"{base}/operations/{op.pk}/")
    asked = []

    def answer(dialog, accept):
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()
    page.once("dialog", lambda d: answer(d, False))
    page.get_by_test_id("op-undo").click()
    expect(page.get_by_test_id("op-undo")).to_be_visible()       # dismissed: still here, nothing started
    assert asked == [f"Undo operation #{op.pk}? It puts 7 messages back in retrying (the state they left); one "
                     "whose id or key is in use again stays out."]
    assert not BulkOperation.objects.filter(action="undo").exists()
    page.once("dialog", lambda d: answer(d, True))
    page.get_by_test_id("op-undo").click()
    expect(page.locator("h1")).to_contain_text("Undo an operation")
    assert len(asked) == 2 and BulkOperation.objects.get(action="undo").total == 7
    assert site_queue.counts("orders")[MessageState.dead] == 7    # no Celery worker here: queued, not run


def test_finding_undo_is_reachable_on_a_390px_phone(page, operator_login, site_queue, celery_env):  # noqa: F811
    base, user, password = operator_login
    killed_all(site_queue, 4)
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, base, user, password)
    page.goto(f"{base}/operations/")
    undo = page.get_by_test_id("op-undo")
    expect(undo).to_be_in_viewport()
    box = undo.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390          # on screen, no sideways scroll
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    expect(page.get_by_role("table").get_by_role("cell", name="kill")).to_be_visible()   # still a table for readers
    page.once("dialog", lambda d: d.accept())
    undo.click()
    expect(page.locator("h1")).to_contain_text("Undo an operation")
