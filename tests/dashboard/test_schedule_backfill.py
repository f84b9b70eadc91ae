"""A schedule's backfill as a bulk operation (schedules/<name>/backfill/): the preview (how many
ticks, the first five, a signed frozen scope), the confirmation that starts an operation, its run
in batches with progress, skipped ticks and audit, a resume that continues at its cursor, and
the refusals. The task runs in this process (as the other operation tests do); Redis is real."""

import dataclasses
import html
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard import operation_kinds
from dashboard.models import AuditEntry, BulkOperation
from dashboard.tasks import STALL_AFTER, resume_stalled_operations, run_bulk_operation

pytestmark = pytest.mark.django_db
FMT = "%Y-%m-%dT%H:%M:%S"


@pytest.fixture
def poll(site_queue, monkeypatch):
    """A schedule every minute on its own topic; operations are queued into a list, not Celery."""
    site_queue.configure_topic("webhooks")
    site_queue.upsert_schedule("poll", topic="webhooks", every=60, payload="ping")
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    return site_queue, queued


def span(q, ticks: int) -> tuple[dict, list[int]]:
    """The form fields of a past range holding ``ticks`` minutes, and those tick times (ms)."""
    end_ms = q.server_ms() // 60_000 * 60_000 - 60_000
    times = [end_ms - k * 60_000 for k in range(ticks - 1, -1, -1)]
    return ({"from": datetime.fromtimestamp(times[0] / 1000, UTC).strftime(FMT),
             "to": datetime.fromtimestamp(end_ms / 1000, UTC).strftime(FMT)}, times)


def start(client, name: str, fields: dict, **extra):
    """Preview, then confirm the signed scope it shows; returns (preview response, confirm response)."""
    url = reverse("delayq:schedule_backfill", args=[name])
    preview = client.get(url, fields)
    assert preview.status_code == 200, preview.content.decode()[:500]
    return preview, client.post(url, {"scope": preview.context["scope_token"], **extra})


def _stalled(op) -> None:
    """The operation's worker stopped writing progress longer ago than the stall limit."""
    BulkOperation.objects.filter(pk=op.pk).update(heartbeat=timezone.now() - STALL_AFTER - timedelta(seconds=1))


def keys(q, topic: str) -> list[str]:
    out = []
    while batch := q.claim(topic, 100):
        out += [d.message.key for d in batch]
        q.ack_many(batch)
    return out


def test_backfill_is_previewed_then_runs_as_an_audited_operation(operator, viewer, poll):
    """The preview says how many ticks and lists the first five, publishing nothing; the
    confirmation starts a backfill operation (nothing published in the request); its run
    publishes each tick once in batches of 10, and a second backfill of the range skips them all."""
    q, queued = poll
    fields, times = span(q, 25)
    url = reverse("delayq:schedule_backfill", args=["poll"])
    assert viewer.get(url, fields).status_code == 403
    preview, confirm = start(operator, "poll", fields, rate_limit="5000")
    page = html.unescape(preview.content.decode())
    assert "<strong data-testid=\"backfill-count\">25</strong> ticks of poll (Every 1 min)" in page
    shown = preview.context["first"]
    assert [round(t.timestamp() * 1000) for t in shown] == times[:5] and page.count("<li><time") == 5
    assert confirm.status_code == 302
    op = BulkOperation.objects.get()
    assert confirm["Location"] == reverse("delayq:operation", args=[op.pk]) and queued == [op.pk]
    assert (op.action, op.total, op.batch_size, op.rate_limit, op.status) == ("backfill", 25, 10, 5000, "pending")
    assert op.scope["schedule"] == "poll" and (op.scope["from_ms"], op.scope["to_ms"]) == (times[0], times[-1])
    assert sum(q.counts("webhooks").values()) == 0            # nothing published in the request
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert (op.moved, op.skipped, op.failed, op.progress, op.cursor) == (25, 0, 0, 100, "done")
    assert q.counts("webhooks")["ready"] == 25 and q.schedule("poll").runs == 0
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert "Published</th><td data-testid=\"op-moved\">25<" in page and "the 25 ticks of schedule poll" in page
    assert [e for e in AuditEntry.objects.order_by("id").values_list("action", "requested", "affected")] == [
        ("backfill_operation.start", 25, None), ("backfill_operation.done", 25, 25)]
    # Again over the same range: every tick's message is still there, so none is published twice.
    start(operator, "poll", fields)
    again = BulkOperation.objects.order_by("-id").first()
    assert run_bulk_operation(again.pk) == "done"
    again.refresh_from_db()
    assert (again.moved, again.skipped) == (0, 25) and q.counts("webhooks")["ready"] == 25
    assert "Skipped (its message was still there)" in operator.get(reverse("delayq:operation", args=[again.pk])
                                                                   ).content.decode()
    assert sorted(keys(q, "webhooks")) == sorted(f"schedule:poll:{t}" for t in times)


def test_a_resumed_backfill_continues_at_its_cursor(operator, poll, monkeypatch):
    """A worker that dies after two batches leaves the operation running with its cursor at the
    20th tick; the ticks it published are consumed meanwhile (so no dedup key would stop them
    again); the resumed run publishes only the 5 after the cursor: 25 in all, each once."""
    q, _queued = poll
    fields, times = span(q, 25)
    start(operator, "poll", fields, rate_limit="10000")
    op = BulkOperation.objects.get()
    kind = operation_kinds.KINDS["backfill"]
    calls = []

    class WorkerKilled(BaseException):
        pass

    def dies_on_the_third_batch(topic, scope, run):
        calls.append(run.after)
        if len(calls) == 3:
            raise WorkerKilled
        return kind.batch(topic, scope, run)
    monkeypatch.setitem(operation_kinds.KINDS, "backfill", dataclasses.replace(kind, batch=dies_on_the_third_batch))
    with pytest.raises(WorkerKilled):
        run_bulk_operation(op.pk)
    op.refresh_from_db()
    assert (op.status, op.moved, op.cursor) == ("running", 20, str(times[19]))
    assert len(first := keys(q, "webhooks")) == 20                     # consumed: acked and gone
    monkeypatch.setitem(operation_kinds.KINDS, "backfill", kind)
    assert run_bulk_operation(op.pk) == "held"                         # the dead run's hold is fresh ...
    _stalled(op)                                                       # ... until its heartbeat is stale
    assert run_bulk_operation(op.pk) == "done"                         # what resume (or the stall check) queues
    op.refresh_from_db()
    assert (op.moved, op.skipped, op.status) == (25, 0, "done")
    assert sorted(first + keys(q, "webhooks")) == sorted(f"schedule:poll:{t}" for t in times)
    assert q.stats("webhooks")["published"] == 25


def test_backfill_refusals_say_what_to_change(operator, poll):
    """A future end, an unreadable date, an end before the start and a range over 100,000 ticks
    are 400s at the preview; a tampered or another schedule's scope, and a bad rate, are 400s at
    the confirmation; nothing is published or started."""
    q, queued = poll
    fields, _ = span(q, 3)
    url = reverse("delayq:schedule_backfill", args=["poll"])

    def said(response, status):
        assert response.status_code == status
        return html.unescape(response.content.decode())
    assert "the end is in the future" in said(operator.get(url, {**fields, "to": "2999-01-01T00:00:00"}), 400)
    assert "'yesterday' is not a date" in said(operator.get(url, {**fields, "from": "yesterday"}), 400)
    assert "before its start" in said(operator.get(url, {"from": fields["to"], "to": fields["from"]}), 400)
    q.upsert_schedule("fast", topic="webhooks", every=0.1)
    three_hours = {"from": datetime.fromtimestamp(q.server_ms() / 1000 - 4 * 3600, UTC).strftime(FMT),
                   "to": datetime.fromtimestamp(q.server_ms() / 1000 - 3600, UTC).strftime(FMT)}
    too_many = operator.get(reverse("delayq:schedule_backfill", args=["fast"]), three_hours)
    assert "more than 100,000 ticks of fast; narrow it" in said(too_many, 400)
    token = operator.get(url, fields).context["scope_token"]
    assert "altered" in said(operator.post(url, {"scope": token[:-3] + "xyz"}), 400)
    fast_token = operator.get(reverse("delayq:schedule_backfill", args=["fast"]), fields).context["scope_token"]
    assert "another schedule" in said(operator.post(url, {"scope": fast_token}), 400)
    assert "rate_limit" in said(operator.post(url, {"scope": token, "rate_limit": "0"}), 400)
    assert "rate_limit" in said(operator.post(url, {"scope": token, "rate_limit": "lots"}), 400)
    assert not BulkOperation.objects.exists() and not queued and sum(q.counts("webhooks").values()) == 0
    assert operator.get(reverse("delayq:schedule_backfill", args=["nope"]), fields).status_code == 404


def test_a_schedule_retimed_or_deleted_after_the_preview_is_refused_or_stops_its_backfill(operator, admin_user, poll):
    """Retimed between preview and confirmation: 409, open the preview again. Retimed (or
    deleted) while its operation runs: the operation fails saying why, audited, and publishes
    nothing more."""
    q, _queued = poll
    fields, _ = span(q, 5)
    url = reverse("delayq:schedule_backfill", args=["poll"])
    token = operator.get(url, fields).context["scope_token"]
    q.upsert_schedule("poll", topic="webhooks", every=120, payload="ping")
    refused = operator.post(url, {"scope": token})
    assert refused.status_code == 409 and "retimed since the preview" in refused.content.decode()
    assert not BulkOperation.objects.exists()
    start(operator, "poll", fields)
    op = BulkOperation.objects.get()
    q.upsert_schedule("poll", topic="webhooks", every=60, payload="ping")
    assert run_bulk_operation(op.pk) == "failed"
    op.refresh_from_db()
    assert op.moved == 0 and "moved or retimed since the preview" in op.error
    assert sum(q.counts("webhooks").values()) == 0
    assert AuditEntry.objects.get(action="backfill_operation.failed").result == "error"
    # Deleted: before the confirmation a 404; during the operation it fails saying so.
    token = operator.get(url, fields).context["scope_token"]
    start(operator, "poll", fields)
    running = BulkOperation.objects.order_by("-id").first()
    q.delete_schedule("poll")
    assert operator.post(url, {"scope": token}).status_code == 404
    assert run_bulk_operation(running.pk) == "failed"
    running.refresh_from_db()
    assert "was deleted during its backfill" in running.error and sum(q.counts("webhooks").values()) == 0


def test_an_engine_refusal_fails_the_operation_audited(operator, poll):
    """Security review (kept from the in-request backfill): a publish the topic refuses (a payload
    over its cap) fails the operation with the engine's words on its page and in the audit,
    instead of a task that dies and is resumed forever."""
    q, _queued = poll
    q.configure_topic("small", max_payload_bytes=10)
    q.upsert_schedule("big", topic="small", every=60, payload="x" * 100)
    fields, _ = span(q, 3)
    start(operator, "big", fields)
    op = BulkOperation.objects.get()
    assert run_bulk_operation(op.pk) == "failed"
    op.refresh_from_db()
    assert op.status == "failed" and "bytes" in op.error and "The engine refused" in op.error
    entry = AuditEntry.objects.get(action="backfill_operation.failed")
    assert entry.result == "error" and "bytes" in entry.detail
    assert sum(q.counts("small").values()) == 0


def test_an_operator_cancels_and_resumes_a_backfill_like_any_operation(operator, viewer, poll):
    """Cancel and resume take the kind's permission (publish_message: a viewer gets 403); a
    cancelled backfill publishes nothing more; a failed one is queued again by resume."""
    q, queued = poll
    fields, _ = span(q, 5)
    start(operator, "poll", fields)
    op = BulkOperation.objects.get()
    assert viewer.post(reverse("delayq:operation_cancel", args=[op.pk])).status_code == 403
    assert operator.post(reverse("delayq:operation_cancel", args=[op.pk])).status_code == 302
    assert run_bulk_operation(op.pk) == "cancelled" and sum(q.counts("webhooks").values()) == 0
    start(operator, "poll", fields)
    failed = BulkOperation.objects.order_by("-id").first()
    BulkOperation.objects.filter(pk=failed.pk).update(status="failed", error="Redis failed")
    assert operator.post(reverse("delayq:operation_resume", args=[failed.pk])).status_code == 302
    assert queued[-1] == failed.pk and run_bulk_operation(failed.pk) == "done"
    assert q.counts("webhooks")["ready"] == 5
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"backfill_operation.cancel", "backfill_operation.resume", "backfill_operation.done"} <= actions


def test_finding_a_backfill_cut_off_after_its_last_batch_publishes_nothing_again(operator, poll, monkeypatch):
    """A review found a finished walk stored its cursor as "" (the same as never started): a run
    killed between the last batch and its end, resumed, published the whole range again (its
    messages consumed meanwhile, no dedup key stopped them). The last position is "done" now."""
    q, _queued = poll
    fields, times = span(q, 25)
    start(operator, "poll", fields, rate_limit="10000")
    op = BulkOperation.objects.get()

    class WorkerKilled(BaseException):
        pass

    def killed(*args, **kwargs):
        raise WorkerKilled
    import dashboard.tasks as tasks
    real = tasks._finish
    monkeypatch.setattr(tasks, "_finish", killed)
    with pytest.raises(WorkerKilled):
        run_bulk_operation(op.pk)              # every batch ran; killed before the end was written
    monkeypatch.setattr(tasks, "_finish", real)
    first = keys(q, "webhooks")                # consumed
    _stalled(op)
    assert run_bulk_operation(op.pk) == "done" and keys(q, "webhooks") == []
    op.refresh_from_db()
    assert (op.status, op.moved) == ("done", 25) and sorted(first) == sorted(f"schedule:poll:{t}" for t in times)


def test_finding_a_live_backfill_is_run_by_one_task_at_a_time(operator, poll, monkeypatch):
    """A review found a resume of a running backfill (or Celery redelivering a long task) started a
    second runner, and the two published the same ticks. A run takes the operation only while no
    other holds it or the holder's heartbeat is stale; resume says so while it runs; the stall
    check releases a dead run's hold, and the old run, were it alive, stops at its next write."""
    q, queued = poll
    fields, _times = span(q, 30)
    start(operator, "poll", fields, rate_limit="10000")
    op = BulkOperation.objects.get()
    kind = operation_kinds.KINDS["backfill"]
    second = []

    def a_second_task_arrives(topic, scope, run):
        if not second:
            second.append(run_bulk_operation(op.pk))      # while the first holds it, after one batch
        return kind.batch(topic, scope, run)
    monkeypatch.setitem(operation_kinds.KINDS, "backfill", dataclasses.replace(kind, batch=a_second_task_arrives))
    assert run_bulk_operation(op.pk) == "done" and second == ["held"]
    assert len(keys(q, "webhooks")) == 30
    # Resume while running (fresh heartbeat) is refused in words; once stale, it queues a run.
    again = start(operator, "poll", fields)[1]
    run = BulkOperation.objects.order_by("-id").first()
    BulkOperation.objects.filter(pk=run.pk).update(status="running", runner="a-live-task", heartbeat=timezone.now())
    resumed = operator.post(reverse("delayq:operation_resume", args=[run.pk]), follow=True)
    assert "is running (last progress" in resumed.content.decode() and queued.count(run.pk) == 1
    monkeypatch.setattr("dashboard.tasks.run_bulk_operation.delay", lambda op_id: queued.append(op_id))
    _stalled(run)
    assert resume_stalled_operations() == [run.pk] and queued.count(run.pk) == 2
    run.refresh_from_db()
    assert run.runner == "" and again.status_code == 302


def test_finding_a_double_posted_backfill_preview_starts_one_operation(operator, poll):
    """A review found posting one signed preview twice (a double click) started two backfills of
    the range; the second post now leads to the first operation."""
    q, queued = poll
    fields, _ = span(q, 5)
    preview, first = start(operator, "poll", fields)
    url = reverse("delayq:schedule_backfill", args=["poll"])
    twice = operator.post(url, {"scope": preview.context["scope_token"]})
    op = BulkOperation.objects.get()
    assert first["Location"] == twice["Location"] == reverse("delayq:operation", args=[op.pk]) and queued == [op.pk]


def test_finding_the_backfill_cursor_is_exact_to_the_millisecond(operator, site_queue):
    """A review found the cursor went through a float: after a whole-second tick of 2004 the next
    batch began 1 ms early and published that tick again."""
    from dashboard.services.operations import BulkRun
    from dashboard.services.schedules import backfill_batch, timing_words

    site_queue.configure_topic("webhooks")
    site_queue.upsert_schedule("sec", topic="webhooks", cron="* * * * * *", payload=1,
                               start=datetime(2004, 1, 1, tzinfo=UTC))
    t = 1083548756000   # 2004-05-03T01:45:56Z: a tick whose float round trip loses a millisecond
    scope = {"schedule": "sec", "from_ms": t - 9000, "to_ms": t + 20000, "timing": timing_words(site_queue.schedule("sec"))}
    run = BulkRun(size=10, actor="test")
    backfill_batch("webhooks", scope, run)
    assert run.after == str(t)
    first = keys(site_queue, "webhooks")
    backfill_batch("webhooks", scope, run)
    assert f"schedule:sec:{t}" in first and f"schedule:sec:{t}" not in keys(site_queue, "webhooks")
