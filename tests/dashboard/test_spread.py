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


def _confirm(client, preview, group="default"):
    return client.post(reverse("delayq:spread", args=["orders", group]), {"scope": preview.context["scope_token"]})


def _window(op, own):
    """The due times a spread gives: slot k of the window, or the message's own due time if later."""
    start, over, slots = op.scope["start_ms"], op.scope["over_ms"], op.scope["count"]
    return [max(start + k * over // slots, due) for k, due in enumerate(own)]


def test_spread_runs_in_celery_and_spaces_the_backlog_in_due_order(operator, site_queue, celery_env):
    site_queue.configure_group("orders", "default", ordered=True)
    # A backlog collapsed onto one instant (as "reschedule all" leaves it), and one ordered key.
    head = site_queue.publish("orders", "head", order_key="acct", delay=20)
    held = site_queue.publish("orders", "held", order_key="acct", delay=20)
    ids = [site_queue.publish("orders", str(i), delay=30) for i in range(250)]
    preview = _preview(operator)
    assert preview.status_code == 200 and preview.context["count"] == 251      # held: not counted
    page = preview.content.decode()
    assert head in page and "spaced evenly in due order over 10 min" in page   # samples: the soonest due first
    assert "none becomes due earlier" in page
    own = [_due_ms(site_queue, "orders", m) for m in [head, *ids]]
    worker = start_worker(celery_env)
    try:
        assert _confirm(operator, preview).status_code == 302
        op = BulkOperation.objects.get()
        wait_for(lambda: BulkOperation.objects.get().status == "done", 60, "spread done")
    finally:
        worker.terminate()
        worker.wait(30)
    op.refresh_from_db()
    assert (op.action, op.total, op.moved, op.failed) == ("spread", 251, 251, 0)
    # In due order: the key's head (due soonest) takes slot 0, then the rest in publish order.
    dues = [_due_ms(site_queue, "orders", m) for m in [head, *ids]]
    assert dues == _window(op, own) and dues == sorted(dues)
    assert dues[-1] > own[-1] + 500_000                # the backlog really was spread out
    assert site_queue.get("orders", held).state is MessageState.pending
    assert site_queue.get("orders", held).due_at is None and site_queue.due_forecast("orders").held == 1
    assert site_queue.counts("orders")[MessageState.pending] == 252
    assert {"spread_operation.start", "spread_operation.done"} <= set(AuditEntry.objects.values_list("action",
                                                                                                    flat=True))


def test_a_resumed_spread_continues_the_spacing(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    ids = site_queue.publish_many("orders", [str(i) for i in range(150)], delay=10)
    own = [_due_ms(site_queue, "orders", m) for m in ids]
    _confirm(operator, _preview(operator, minutes=5))
    op = BulkOperation.objects.get()      # no worker: it waits, as after a broker outage
    # One batch by a run that then dies before anything else...
    run = BulkRun(size=100, actor=f"spread-operation:{op.pk}")
    examined, moved = spread_batch("orders", {**op.scope, "group": "default"}, run)
    BulkOperation.objects.filter(pk=op.pk).update(moved=moved, status="running", runner="dead", heartbeat=None,
                                                  cursor=run.after)
    assert (examined, moved) == (100, 100)
    # ...and the resumed run (the task, in this process) places the other 50 below them.
    assert run_bulk_operation.run(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 150
    assert [_due_ms(site_queue, "orders", m) for m in ids] == _window(op, own)


def test_finding_a_resumed_spread_gives_no_slot_twice(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    # A run that died after a batch but before its cursor was saved: the resumed run walks the
    # window again from its end; each message's slot is its rank, so nothing moves twice.
    ids = site_queue.publish_many("orders", [str(i) for i in range(150)], delay=10)
    own = [_due_ms(site_queue, "orders", m) for m in ids]
    _confirm(operator, _preview(operator, minutes=5))
    op = BulkOperation.objects.get()
    spread_batch("orders", {**op.scope, "group": "default"}, BulkRun(size=100, actor="spread-operation:x"))
    BulkOperation.objects.filter(pk=op.pk).update(status="running", runner="dead", heartbeat=None, cursor="")
    assert run_bulk_operation.run(op.pk) == "done"
    dues = [_due_ms(site_queue, "orders", m) for m in ids]
    assert dues == _window(op, own)       # each at its own rank's slot, as one uninterrupted run would place it


def test_finding_spread_leaves_what_is_due_after_the_window_alone(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    # One message due in 5 days no longer holds the backlog until after it.
    backlog = site_queue.publish_many("orders", [str(i) for i in range(100)], delay=60)
    far = site_queue.publish("orders", "far", delay=5 * 86_400)
    far_due = _due_ms(site_queue, "orders", far)
    own = [_due_ms(site_queue, "orders", m) for m in backlog]
    preview = _preview(operator)
    assert preview.context["count"] == 100
    before = site_queue.server_ms()
    _confirm(operator, preview)
    assert run_bulk_operation.run(BulkOperation.objects.get().pk) == "done"
    op = BulkOperation.objects.get()
    assert before <= op.scope["start_ms"] <= site_queue.server_ms() and op.moved == 100
    dues = [_due_ms(site_queue, "orders", m) for m in backlog]
    assert dues == _window(op, own) and max(dues) <= op.scope["start_ms"] + 600_000
    assert all(d >= o for d, o in zip(dues, own, strict=True))       # none made due earlier
    assert _due_ms(site_queue, "orders", far) == far_due


def test_finding_spread_slots_count_only_the_window(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    site_queue.publish_many("orders", [str(i) for i in range(40)], delay=60)
    preview = _preview(operator)
    # Published between the preview and the confirmation, due after the window: not counted.
    site_queue.publish_many("orders", [f"late{i}" for i in range(25)], delay=3 * 86_400)
    _confirm(operator, preview)
    op = BulkOperation.objects.get()
    assert op.total == op.scope["count"] == 40
    assert run_bulk_operation.run(op.pk) == "done"
    op.refresh_from_db()
    assert (op.moved, op.skipped) == (40, 0)


def test_finding_spread_confirmation_checks_max_delay_again(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    site_queue.publish("orders", "x", delay=60)
    preview = _preview(operator, minutes=90)
    assert preview.status_code == 200
    site_queue.configure_topic("orders", max_delay=3600)    # lowered between the preview and the confirmation
    answer = _confirm(operator, preview)
    assert answer.status_code == 400 and b"beyond orders's max_delay of 60 min" in answer.content
    assert not BulkOperation.objects.exists()


def test_finding_a_spread_preview_starts_one_operation(operator, site_queue, celery_env):   # celery_env: the broker (no worker)
    site_queue.publish("orders", "x", delay=60)
    preview = _preview(operator)
    first = _confirm(operator, preview)
    second = _confirm(operator, preview)
    op = BulkOperation.objects.get()
    assert first.status_code == second.status_code == 302
    assert second.url == first.url == reverse("delayq:operation", args=[op.pk])


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
    answer = _preview(operator, minutes=90)             # ends 90 min from now
    assert answer.status_code == 400 and b"beyond orders's max_delay of 90 min" not in answer.content
    assert b"beyond orders's max_delay of 60 min" in answer.content
    assert _preview(operator, minutes=45).status_code == 200
