"""Bulk replay as an operation, end to end through a real Celery worker against real Redis:
completion, cancel, and resume after the worker is killed (nothing replayed twice)."""

import signal

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from queue_core import MessageState
from tests.conftest import start_worker, wait_for

from .test_pages import kill

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def worker(celery_env):
    proc = start_worker(celery_env)
    yield proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


def start_replay(client, topic, rate):
    preview = client.get(reverse("delayq:replay_all", args=[topic]))
    assert preview.status_code == 200
    ctx = preview.context
    response = client.post(reverse("delayq:replay_all", args=[topic]), {
        "scope": ctx["scope_token"], "rate_limit": rate})
    assert response.status_code == 302
    return BulkOperation.objects.get()


def op_status(op):
    op.refresh_from_db()
    return op.status


def test_bulk_replay_runs_in_celery_to_completion(operator, site_queue, worker):
    kill(site_queue, "orders", [str(i) for i in range(250)])
    op = start_replay(operator, "orders", rate=10_000)
    assert op.total == 250
    wait_for(lambda: op_status(op) == "done", 60, "operation done")
    assert (op.moved, op.skipped, op.failed, op.progress) == (250, 0, 0, 100)
    assert site_queue.counts("orders")[MessageState.ready] == 250
    page = operator.get(reverse("delayq:operation", args=[op.pk]), headers={"HX-Request": "true"})
    assert 'data-status="done"' in page.content.decode() and "hx-trigger" not in page.content.decode()
    assert {"replay_operation.start", "replay_operation.done"} <= set(AuditEntry.objects.values_list("action", flat=True))


def test_cancel_stops_the_operation(operator, site_queue, worker):
    kill(site_queue, "orders", [str(i) for i in range(400)])
    op = start_replay(operator, "orders", rate=100)   # ~4 s in all
    wait_for(lambda: op_status(op) == "running" and op.moved > 0, 30, "first batch")
    operator.post(reverse("delayq:operation_cancel", args=[op.pk]))
    wait_for(lambda: AuditEntry.objects.filter(action="replay_operation.cancelled").exists(), 30, "task stopped")
    op.refresh_from_db()
    assert op.status == "cancelled" and 0 < op.moved < 400 and op.cancelled_by.username == "operator"
    counts = site_queue.counts("orders")
    assert counts[MessageState.ready] == op.moved and counts[MessageState.dead] == 400 - op.moved


def test_resume_after_a_killed_worker_replays_nothing_twice(operator, site_queue, celery_env):
    kill(site_queue, "orders", [str(i) for i in range(300)])
    first = start_worker(celery_env)
    second = None
    try:
        op = start_replay(operator, "orders", rate=100)
        wait_for(lambda: op_status(op) == "running" and op.moved >= 100, 30, "partial progress")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        moved_before = op.moved
        assert moved_before < 300
        second = start_worker(celery_env)
        operator.post(reverse("delayq:operation_resume", args=[op.pk]))
        wait_for(lambda: op_status(op) == "done", 60, "resumed operation done")
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.terminate()
                p.wait(30)
    assert site_queue.counts("orders")[MessageState.ready] == 300
    assert site_queue.stats("orders")["replayed"] == 300   # Redis's own count: each letter replayed once
    # The record adds up; a batch whose progress write the kill cut off shows as skipped, never twice.
    assert op.moved + op.skipped == 300 and op.moved >= moved_before
