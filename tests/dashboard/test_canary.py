"""Canary replay (dashboard/canary.py), end to end: a real Celery worker runs the replay, a real
delayq Worker consumes it. A fixed handler acks the canary and the rest is replayed; a handler that
still fails sends the canary back to the dead letters and the rest stays dead, untouched; a canary
nobody consumes fails when its wait ends. Each decision is audited."""

import threading

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from dashboard.tasks import run_bulk_operation
from queue_core import MessageState, Worker
from tests.conftest import start_worker, wait_for
from tests.ha.conftest import replicated  # noqa: F401 - the fixture
from tests.ha.test_wait_replicas import frozen

from .test_pages import kill
from .test_replicas import durable_site  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def celery_worker(celery_env):
    proc = start_worker(celery_env)
    yield proc
    proc.terminate()
    proc.wait(30)


def consuming(q, handler):
    """A delayq Worker on "orders" in a thread; returns its stop()."""
    worker = Worker(q, {"orders": handler}, concurrency=4, idle_wait=0.2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()

    def stop():
        worker.stop()
        thread.join(15)
        assert not thread.is_alive()
    return stop


def start_canary(client, **form):
    url = reverse("delayq:replay_all", args=["orders"])
    preview = client.get(url)
    fields = {"scope": preview.context["scope_token"], "rate_limit": 10_000, "canary": "1", "percent": "1",
              "minimum": "20", "wait_s": "60", "threshold": "95", **form}
    return client.post(url, fields)


def finished(status=None):
    op = BulkOperation.objects.get()
    return op.status in ("done", "failed", "cancelled") and (status is None or op.status == status)


def test_a_canary_of_a_fixed_handler_passes_and_the_rest_is_replayed(operator, site_queue, celery_worker):
    kill(site_queue, "orders", [str(i) for i in range(100)])
    stop = consuming(site_queue, lambda m: None)              # the fix is deployed: every message acks
    try:
        assert start_canary(operator).status_code == 302
        wait_for(finished, 60, "operation finished")
        wait_for(lambda: site_queue.counts("orders")[MessageState.ready] == 0 and
                 site_queue.counts("orders")[MessageState.unacked] == 0, 30, "all consumed")
    finally:
        stop()
    op = BulkOperation.objects.get()
    assert op.status == "done" and op.moved == 100
    c = op.canary
    assert (c["size"], len(c["ids"]), c["acked"], c["dead"], c["verdict"]) == (20, 20, 20, 0, "passed")
    assert site_queue.counts("orders")[MessageState.dead] == 0
    entry = AuditEntry.objects.get(action="replay_operation.canary")
    assert entry.result == "ok" and "20 of 20 acked (100 %)" in entry.detail
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert 'data-verdict="passed"' in page and 'data-testid="canary-acked">20<' in page


def test_a_canary_of_a_still_failing_handler_stops_and_leaves_the_rest_dead(operator, site_queue, celery_worker):
    ids = kill(site_queue, "orders", [str(i) for i in range(100)])

    def still_broken(m):
        raise RuntimeError("still broken")
    stop = consuming(site_queue, still_broken)
    try:
        start_canary(operator, wait_s="600")          # decided as soon as the threshold is out of reach
        wait_for(finished, 60, "operation finished")
    finally:
        stop()
    op = BulkOperation.objects.get()
    c = op.canary
    assert op.status == "failed" and op.moved == 20 and c["verdict"] == "failed" and c["acked"] == 0
    assert c["dead"] >= 2 and "too many died again to reach 95 % acked" in op.error
    assert "the rest stays dead, untouched" in op.error
    wait_for(lambda: site_queue.counts("orders")[MessageState.dead] == 100, 30, "the canary dead again")
    untouched = [m for m in ids if m not in c["ids"]]
    assert len(untouched) == 80
    assert all(site_queue.get("orders", m).replay_count == 0 for m in untouched)
    entry = AuditEntry.objects.get(action="replay_operation.canary")
    assert entry.result == "refused" and "canary failed" in entry.detail
    # Resuming a failed canary is refused: the decision stands (test_finding_failed_canary_*).
    assert operator.post(reverse("delayq:operation_resume", args=[op.pk])).status_code == 409
    assert all(site_queue.get("orders", m).replay_count == 0 for m in untouched)


def test_a_canary_nobody_consumes_fails_when_its_wait_ends(operator, site_queue, celery_worker):
    kill(site_queue, "orders", [str(i) for i in range(30)])
    start_canary(operator, wait_s="2", minimum="5")
    wait_for(finished, 60, "operation finished")
    op = BulkOperation.objects.get()
    assert op.status == "failed" and op.canary["waiting"] == 5 and "the 2 s wait ended below 95 % acked" in op.error
    assert site_queue.counts("orders")[MessageState.dead] == 25


def test_canary_thresholds_are_checked(operator, site_queue):
    kill(site_queue, "orders", ["a"])
    for field, value in (("threshold", "150"), ("wait_s", "0"), ("percent", "x")):
        answer = start_canary(operator, **{field: value})
        assert answer.status_code == 400 and b"the canary's" in answer.content, field
    assert not BulkOperation.objects.exists()


def test_finding_canary_of_a_small_error_group_picks_its_own_letters(operator, site_queue, celery_worker):
    # 300 older dead letters of another error, then 50 of the target error: the canary is read
    # from the target's own index, not from the first pages of the whole DLQ.
    kill(site_queue, "orders", [f"o{i}" for i in range(300)], error="other failure")
    target = kill(site_queue, "orders", [f"t{i}" for i in range(50)], error="target failure")
    fp = next(g.fingerprint for g in site_queue.error_groups("orders") if g.count == 50)
    stop = consuming(site_queue, lambda m: None)
    try:
        url = reverse("delayq:replay_all", args=["orders"])
        preview = operator.get(url, {"fp": fp})
        answer = operator.post(url, {"scope": preview.context["scope_token"], "fp": fp, "rate_limit": 10_000,
                                     "canary": "1", "percent": "1", "minimum": "20", "wait_s": "60",
                                     "threshold": "95"})
        assert answer.status_code == 302
        wait_for(finished, 60, "operation finished")
    finally:
        stop()
    op = BulkOperation.objects.get()
    assert len(op.canary["ids"]) == 20 and set(op.canary["ids"]) <= set(target)
    assert op.canary["verdict"] == "passed" and op.canary["acked"] == 20
    assert op.status == "done" and op.moved == 50
    assert site_queue.counts("orders")[MessageState.dead] == 300


def test_finding_a_canary_not_replicated_fails_the_operation_and_resumes_the_same_ids(
        celery_env, replicated, durable_site, operator):  # noqa: F811
    kill(durable_site, "orders", [str(i) for i in range(30)])
    assert start_canary(operator, minimum="5", wait_s="1").status_code == 302
    op = BulkOperation.objects.get()                   # no Celery worker: the task runs here
    with frozen(replicated.replicas[0]):
        assert run_bulk_operation.run(op.pk) == "failed"
    op.refresh_from_db()
    # The replay reached the master; the task said so instead of dying, with the ids it chose kept.
    assert "start the operation again" in op.error and op.moved == 5
    chosen = op.canary["ids"]
    assert len(chosen) == 5 and durable_site.counts("orders")[MessageState.dead] == 25
    BulkOperation.objects.filter(pk=op.pk).update(status="pending", runner="")
    assert run_bulk_operation.run(op.pk) == "failed"   # nobody consumes: the 1 s wait ends below 95 %
    op.refresh_from_db()
    assert op.canary["ids"] == chosen and op.canary["waiting"] == 5 and op.moved == 5
    assert durable_site.counts("orders")[MessageState.dead] == 25   # the next 5 were never picked


def test_finding_canary_counts_a_deleted_message_as_left_not_acked(operator, site_queue, celery_worker):
    # An ack leaves no trace in the group: "gone" once counted as acked, so deleting the canary
    # passed it and replayed the rest. The acks are read from the event stream now.
    ids = kill(site_queue, "orders", [str(i) for i in range(30)])
    start_canary(operator, wait_s="600", minimum="20")
    wait_for(lambda: BulkOperation.objects.get().canary.get("replayed"), 60, "canary replayed")
    chosen = BulkOperation.objects.get().canary["ids"]
    assert site_queue.delete("orders", chosen, state="ready") == len(chosen) == 20   # nobody consumed them
    wait_for(finished, 60, "operation finished")
    op = BulkOperation.objects.get()
    c = op.canary
    assert (op.status, c["verdict"], c["acked"], c["left"]) == ("failed", "failed", 0, 20)
    assert "20 deleted, cancelled or expired meanwhile" in op.error
    assert all(site_queue.get("orders", m).replay_count == 0 for m in ids if m not in chosen)
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert 'data-testid="canary-acked">0<' in page and 'data-testid="canary-left">20<' in page


def test_canary_of_a_topic_without_events_counts_every_message_gone_and_says_so(operator, site_queue, celery_env):
    kill(site_queue, "orders", [str(i) for i in range(30)])
    site_queue.configure_topic("orders", events=False)
    start_canary(operator, wait_s="1", minimum="5")     # the broker takes it; it is run here instead
    op = BulkOperation.objects.get()
    assert run_bulk_operation.run(op.pk) == "failed"     # nobody consumes: the 1 s wait ends below 95 %
    op.refresh_from_db()
    assert op.canary["acks_recorded"] is False and op.canary["waiting"] == 5
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert "event stream is off, so an ack cannot be told from a delete" in page
    assert 'data-testid="canary-left"' not in page


def failed_canary_operation(ids) -> BulkOperation:
    """A replay operation stopped by its canary, as run_canary leaves it (no Celery needed)."""
    why = "0 of 2 acked (0 %), 2 dead again: too many died again to reach 95 % acked, so the rest stays dead, untouched"
    return BulkOperation.objects.create(
        topic="orders", status="failed", total=len(ids), moved=2, rate_limit=100,
        scope={"fingerprint": "", "since_ms": 0, "cutoff_ms": 2 ** 41},
        canary={"size": 2, "percent": 1.0, "minimum": 2, "wait_s": 60, "threshold": 95.0, "ids": ids[:2],
                "replayed": True, "acked": 0, "dead": 2, "left": 0, "waiting": 0, "verdict": "failed", "why": why},
        error=f"Canary failed: {why}.")


def test_finding_failed_canary_refuses_resume_with_409_and_says_why(operator, site_queue):
    ids = kill(site_queue, "orders", [str(i) for i in range(10)])
    op = failed_canary_operation(ids)
    answer = operator.post(reverse("delayq:operation_resume", args=[op.pk]))
    assert answer.status_code == 409
    assert b"canary failed, so the rest of its dead letters stay dead, untouched" in answer.content
    op.refresh_from_db()
    assert (op.status, op.runner, op.error.startswith("Canary failed")) == ("failed", "", True)
    assert site_queue.counts("orders")[MessageState.dead] == 10        # nothing replayed
    entry = AuditEntry.objects.get(action="replay_operation.resume")
    assert entry.result == "refused" and "canary failed" in entry.detail
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert 'data-testid="op-resume"' not in page and 'data-testid="op-no-resume"' in page


def test_finding_failed_canary_refusal_needs_the_permission_and_csrf(viewer, operator, site_queue):
    op = failed_canary_operation(kill(site_queue, "orders", ["a", "b"]))
    assert viewer.post(reverse("delayq:operation_resume", args=[op.pk])).status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    assert strict.post(reverse("delayq:operation_resume", args=[op.pk])).status_code == 403


def test_finding_an_operation_that_failed_otherwise_still_offers_resume(operator, site_queue):
    op = BulkOperation.objects.create(topic="orders", status="failed", scope={"fingerprint": "", "since_ms": 0,
                                                                              "cutoff_ms": 0},
                                      canary={"size": 2, "ids": ["x"], "verdict": ""}, error="Redis failed: boom")
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert 'data-testid="op-resume"' in page and 'data-testid="op-no-resume"' not in page
