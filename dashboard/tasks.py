"""Celery tasks: bulk work never runs in a web request.

run_bulk_operation executes a BulkOperation of any kind (operation_kinds: replay, purge, reschedule,
kill, backfill) in bounded batches (one script call each) with a rate limit, writes progress after every
batch, stops when cancelled, and is safe to run again after a crash: the scope's cutoff is frozen at
creation and what moved has left the scope, so a resumed run continues where it stopped without
moving anything twice.
"""

import logging
import time
import uuid
from datetime import timedelta

from celery import shared_task
from django.db.models import F, Q
from django.utils import timezone

from . import audit
from .canary import run_canary
from .models import BulkOperation
from .services.contracts import NotReplicated, QueueError, StateConflict, Unavailable
from .services.operations import BulkRun
from .services.undo import hold_of

log = logging.getLogger("delayq.tasks")
Status = BulkOperation.Status


# Progress and outcome live in the database rows, never in Celery results (no result store needed).
@shared_task(acks_late=True, reject_on_worker_lost=True, name="delayq.run_bulk_operation", ignore_result=True)
def run_bulk_operation(op_id: int) -> str:
    op = BulkOperation.objects.get(pk=op_id)
    if op.status in (Status.DONE, Status.CANCELLED, Status.FAILED):
        return op.status
    # One run at a time: this run takes the operation only when no other holds it, or the holder's
    # heartbeat is stale (its worker died). A second task for a live operation (a resume clicked
    # twice, Celery redelivering a long task) leaves at once instead of publishing again.
    runner = uuid.uuid4().hex
    now = timezone.now()
    if not BulkOperation.objects.filter(pk=op_id).filter(
            Q(runner="") | Q(heartbeat__isnull=True) | Q(heartbeat__lt=now - STALL_AFTER)).exclude(
            status__in=(Status.DONE, Status.CANCELLED, Status.FAILED)).update(
            runner=runner, status=Status.RUNNING, heartbeat=now):
        log.info("operation %s is run by another task; this one leaves", op_id)
        return "held"
    BulkOperation.objects.filter(pk=op_id, started__isnull=True).update(started=now)
    scope = {**op.scope, "group": op.group}   # the operation's group, whatever its scope says
    started = time.monotonic()
    moved_this_run = 0
    kind = op.kind
    if kind.keeps_cursor and op.cursor == CURSOR_DONE:
        _finish(op_id, Status.DONE, runner=runner)    # every batch ran; only the finish was cut off
        return Status.DONE
    run = BulkRun(size=op.batch_size, actor=f"{op.action}-operation:{op_id}",
                  after=(op.cursor or None) if kind.keeps_cursor else None, hold=hold_of(op_id) if kind.holds else None)
    try:
        if op.canary and op.canary.get("verdict") != "passed":
            # A canary replay: its first messages are replayed and watched before the rest
            # (canary.py); its errors end the operation as the batches' do (below).
            outcome = op.canary.get("verdict") or run_canary(op, runner, run.actor)
            if outcome == "superseded":
                return outcome
            if outcome != "passed":
                status = Status.CANCELLED if outcome == "cancelled" else Status.FAILED
                why = BulkOperation.objects.get(pk=op_id).canary.get("why", "")
                _finish(op_id, status, f"Canary {outcome}: {why}." if why else "", runner=runner)
                return status
            started = time.monotonic()   # the rate limit counts from the end of the canary's wait
        while True:
            status = BulkOperation.objects.values_list("status", flat=True).get(pk=op_id)
            if status == Status.CANCELLED:
                _finish(op_id, Status.CANCELLED, runner=runner)
                return Status.CANCELLED
            examined, moved = kind.batch(op.topic, scope, run)
            moved_this_run += moved
            done = kind.finished(run, examined)
            # A walk's last position is stored as CURSOR_DONE, never as "" (not started): a run
            # resumed after the last batch must not walk (and publish) the range again.
            cursor = {"cursor": CURSOR_DONE if done else (run.after or "")} if kind.keeps_cursor else {}
            if not BulkOperation.objects.filter(pk=op_id, runner=runner).update(
                    moved=F("moved") + moved, heartbeat=timezone.now(), **cursor):
                log.warning("operation %s was taken over by another task (this one stalled); this one stops", op_id)
                return "superseded"
            if done:
                break
            # Rate limit: never faster than rate_limit messages per second on average.
            ahead = moved_this_run / max(op.rate_limit, 1) - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    except StateConflict as exc:
        BulkOperation.objects.filter(pk=op_id).update(failed=F("failed") + 1)
        _finish(op_id, Status.FAILED, str(exc), runner=runner)
        return Status.FAILED
    except Unavailable as exc:
        _finish(op_id, Status.FAILED, f"Redis failed: {exc}; start the operation again to resume it.", runner=runner)
        return Status.FAILED
    except NotReplicated as exc:
        # Replays are compare-and-set: starting again resumes without replaying anything twice.
        BulkOperation.objects.filter(pk=op_id).update(moved=F("moved") + len(exc.ids))
        _finish(op_id, Status.FAILED, f"{exc}; start the operation again to resume it once the replicas are back.",
                runner=runner)
        return Status.FAILED
    except QueueError as exc:
        # Any other refusal (a backfill's publish refused by the topic's limits, say): said on the
        # operation's page and in its audit, instead of a task that dies and is resumed forever.
        _finish(op_id, Status.FAILED, f"The engine refused: {exc}.", runner=runner)
        return Status.FAILED
    _finish(op_id, Status.DONE, runner=runner)
    return Status.DONE


CURSOR_DONE = "done"


def _finish(op_id: int, status: str, error: str = "", *, runner: str) -> None:
    """The operation's end, written only by the run that holds it (then released)."""
    op = BulkOperation.objects.get(pk=op_id)
    skipped = op.skipped
    if status == Status.DONE and not op.scope.get("count_is_lower_bound"):
        # What the preview counted but was no longer dead when reached (replayed or deleted by
        # someone else meanwhile) is reported as skipped.
        skipped = max(0, op.total - op.moved - op.failed)
    if not BulkOperation.objects.filter(pk=op_id, runner=runner).update(
            status=status, finished=timezone.now(), error=error, skipped=skipped, runner=""):
        log.warning("operation %s was taken over by another task before this one could end it", op_id)
        return
    op.refresh_from_db()
    audit.record(op.created_by, f"{op.action}_operation.{status}", topic=op.topic, group=op.group, scope=op.scope,
                 requested=op.total, affected=op.moved, result="ok" if status == Status.DONE else
                 ("refused" if status == Status.CANCELLED else "error"),
                 detail=f"operation #{op.pk}: moved {op.moved}, skipped {op.skipped}, failed {op.failed}. {error}")


STALL_AFTER = timedelta(minutes=2)


@shared_task(name="delayq.resume_stalled_operations", ignore_result=True)
def resume_stalled_operations() -> list[int]:
    """Run by beat every minute: an operation whose task died (worker killed, machine lost) stops
    writing progress; enqueue it again. Safe to repeat: nothing is replayed twice."""
    cutoff = timezone.now() - STALL_AFTER
    stalled = list(BulkOperation.objects.filter(
        Q(status=Status.RUNNING, heartbeat__lt=cutoff) | Q(status=Status.PENDING, created__lt=cutoff,
                                                           started__isnull=True)
    ).values_list("pk", flat=True))
    for op_id in stalled:
        # One resume per stall; the dead run's hold is released so the new task can take it (and
        # the old run, were it only slow, stops at its next progress write).
        BulkOperation.objects.filter(pk=op_id).update(heartbeat=timezone.now(), runner="")
        log.warning("replay operation %s stalled; resuming it", op_id)
        run_bulk_operation.delay(op_id)
    return stalled


@shared_task(name="delayq.archive_events", ignore_result=True)
def archive_events() -> str:
    """Run by beat every few seconds: append new events of every topic to the Parquet archive.
    Overlapping runs are harmless (the second finds the lock held and returns)."""
    from .services import archive

    try:
        report = archive.run_archiver()
    except archive.ArchiveUnavailable as exc:   # e.g. pyarrow not installed: say it, do not crash-loop
        log.warning("event archive skipped: %s", exc)
        return str(exc)
    if report.trimmed:
        log.error("archive: %s", report.describe())
    return report.describe()


@shared_task(name="delayq.run_analytics", acks_late=True, ignore_result=True)
def run_analytics(run_id: int) -> str:
    """Run the Spark job for a queued AnalyticsRun and load its outputs (dashboard.analytics)."""
    from . import analytics

    return analytics.execute(run_id).status


@shared_task(name="delayq.nightly_analytics", ignore_result=True)
def nightly_analytics() -> int | None:
    """Run by beat nightly: recompute the last DELAYQ_ANALYTICS_DAYS days (default 30)."""
    from . import analytics

    try:
        run = analytics.create_run(trigger="schedule", since=analytics.default_since())
    except analytics.RunRefused as exc:
        log.warning("nightly analytics skipped: %s", exc)
        return None
    return analytics.execute(run.pk).pk


@shared_task(name="delayq.evaluate_alerts", ignore_result=True)
def evaluate_alerts() -> int:
    """Evaluate every enabled alert rule; a start or end is delivered by deliver_alerts, queued at once."""
    from . import alerts

    recorded = alerts.evaluate()
    if recorded:
        deliver_alerts.delay()
    return len(recorded)


@shared_task(name="delayq.refresh_metrics", ignore_result=True)
def refresh_metrics() -> int:
    """Render the Prometheus exposition into Redis for the metrics view (DELAYQ_METRICS_REFRESH);
    the size in bytes, 0 when metrics or their refresh are off."""
    from . import conf
    from .services import metrics

    if not (conf.metrics_enabled() and conf.metrics_refresh()):
        return 0
    return metrics.refresh(conf.metrics_refresh())


@shared_task(name="delayq.deliver_alerts", ignore_result=True)
def deliver_alerts() -> tuple[int, int]:
    """Send the alert starts and ends not delivered yet (and retry failed ones when due)."""
    from . import alerts

    return alerts.deliver()
