"""A schedule's backfill as a bulk operation (schedules/<name>/backfill/): the preview (how many
ticks, the first five, a signed frozen scope), the confirmation that starts an operation, its run
in batches with progress, skipped ticks and audit, a resume that continues at its cursor, and
the refusals. The task runs in this process (as the other operation tests do); Redis is real."""

import dataclasses
import html
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from dashboard import operation_kinds
from dashboard.models import AuditEntry, BulkOperation
from dashboard.tasks import run_bulk_operation

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
    assert (op.moved, op.skipped, op.failed, op.progress, op.cursor) == (25, 0, 0, 100, "")
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
