"""Spread as an operation (views_forecast.spread, services.forecast.spread_batch), end to end through
a real Celery worker against real Redis: previewed with count and samples, every pending message
given an evenly spaced due time in its due order, audited, held messages left to their key, and a
resumed run continuing the spacing where the stopped one left it."""

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from dashboard.services.forecast import spread_batch
from dashboard.services.operations import BulkRun
from dashboard.tasks import run_bulk_operation
from queue_core import MessageState
from tests.conftest import start_worker, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def _due_ms(q, topic, mid) -> int:
    return round(q.get(topic, mid).due_at.timestamp() * 1000)


def _preview(client, minutes=10, group="default"):
    return client.get(reverse("delayq:spread", args=["orders", group]) + f"?minutes={minutes}")


def test_spread_runs_in_celery_and_spaces_the_backlog_in_due_order(operator, site_queue, celery_env):
    site_queue.configure_group("orders", "default", ordered=True)
    now = site_queue.server_ms()
    # A backlog collapsed onto one instant (as "reschedule all" leaves it), and one ordered key.
    ids = [site_queue.publish("orders", str(i), delay=120) for i in range(250)]
    head = site_queue.publish("orders", "head", order_key="acct", delay=60)
    held = site_queue.publish("orders", "held", order_key="acct", delay=60)
    preview = _preview(operator)
    assert preview.status_code == 200 and preview.context["count"] == 251      # held: not counted
    page = preview.content.decode()
    assert head in page and "spaced evenly over 10 min" in page   # samples: the soonest due first
    cutoff = _due_ms(site_queue, "orders", ids[-1])
    worker = start_worker(celery_env)
    try:
        confirmed = operator.post(reverse("delayq:spread", args=["orders", "default"]),
                                  {"scope": preview.context["scope_token"]})
        assert confirmed.status_code == 302
        op = BulkOperation.objects.get()
        wait_for(lambda: BulkOperation.objects.get().status == "done", 60, "spread done")
    finally:
        worker.terminate()
        worker.wait(30)
    op.refresh_from_db()
    assert (op.action, op.total, op.moved, op.failed) == ("spread", 251, 251, 0)
    start, step = op.scope["start_ms"], 600_000 / 251
    assert start >= max(now, cutoff + 1)             # never earlier than it was, nor than now
    # In due order: the key's head (due soonest) takes slot 0, then the rest in publish order.
    dues = [_due_ms(site_queue, "orders", m) for m in [head, *ids]]
    assert dues == [start + int(k * step) for k in range(251)]
    assert site_queue.get("orders", held).state is MessageState.pending
    assert site_queue.get("orders", held).due_at is None and site_queue.due_forecast("orders").held == 1
    assert site_queue.counts("orders")[MessageState.pending] == 252
    assert {"spread_operation.start", "spread_operation.done"} <= set(AuditEntry.objects.values_list("action",
                                                                                                    flat=True))


def test_a_resumed_spread_continues_the_spacing(operator, site_queue):
    ids = site_queue.publish_many("orders", [str(i) for i in range(150)], delay=300)
    preview = _preview(operator, minutes=5)
    operator.post(reverse("delayq:spread", args=["orders", "default"]), {"scope": preview.context["scope_token"]})
    op = BulkOperation.objects.get()      # no worker: it waits, as after a broker outage
    # One batch by a run that then dies before anything else...
    run = BulkRun(size=100, actor=f"spread-operation:{op.pk}")
    examined, moved = spread_batch("orders", {**op.scope, "group": "default"}, run)
    BulkOperation.objects.filter(pk=op.pk).update(moved=moved, status="running", runner="dead", heartbeat=None)
    assert (examined, moved) == (100, 100)
    # ...and the resumed run (the task, in this process) places the other 50 after them.
    assert run_bulk_operation.run(op.pk) == "done"
    op.refresh_from_db()
    start, step = op.scope["start_ms"], 300_000 / 150
    assert op.moved == 150
    assert [_due_ms(site_queue, "orders", m) for m in ids] == [start + int(k * step) for k in range(150)]


def test_spread_preview_is_checked_and_permissioned(operator, viewer, site_queue):
    site_queue.publish("orders", "x", delay=60)
    assert _preview(viewer).status_code == 403
    for minutes in ("0", "20000", "ten"):
        bad = _preview(operator, minutes=minutes)
        assert bad.status_code == 400, minutes
    forged = operator.post(reverse("delayq:spread", args=["orders", "default"]), {"scope": "nope"})
    assert forged.status_code == 400 and b"open the preview again" in forged.content
    other = operator.get(reverse("delayq:bulk_state", args=["orders", "default", "pending", "spread"]))
    assert other.status_code == 404                  # spread starts from its own preview only
    assert not BulkOperation.objects.exists()


def test_spread_refuses_a_window_beyond_the_topics_max_delay(operator, site_queue):
    site_queue.configure_topic("orders", max_delay=3600)
    site_queue.publish("orders", "x", delay=1800)
    answer = _preview(operator, minutes=45)             # ends 75 min from now
    assert answer.status_code == 400 and b"beyond orders's max_delay of 60 min" in answer.content
    assert _preview(operator, minutes=20).status_code == 200
