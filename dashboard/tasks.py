"""Celery tasks: bulk work never runs in a web request.

run_bulk_operation executes a BulkOperation of any kind (operation_kinds: replay, purge, reschedule,
kill, backfill) in bounded batches (one script call each) with a rate limit, writes progress after every
batch, stops when cancelled, and is safe to run again after a crash: the scope's cutoff is frozen at
creation and what moved has left the scope, so a resumed run continues where it stopped without
moving anything twice.
"""

import logging
import time
from datetime import timedelta

from celery import shared_task
from django.db.models import F, Q
from django.utils import timezone

from . import audit
from .models import BulkOperation
from .services.contracts import NotReplicated, QueueError, StateConflict, Unavailable
from .services.operations import BulkRun

log = logging.getLogger("delayq.tasks")
Status = BulkOperation.Status


# Progress and outcome live in the database rows, never in Celery results (no result store needed).
@shared_task(acks_late=True, reject_on_worker_lost=True, name="delayq.run_bulk_operation", ignore_result=True)
def run_bulk_operation(op_id: int) -> str:
    op = BulkOperation.objects.get(pk=op_id)
    if op.status in (Status.DONE, Status.CANCELLED, Status.FAILED):
        return op.status
    BulkOperation.objects.filter(pk=op_id, started__isnull=True).update(started=timezone.now())
    BulkOperation.objects.filter(pk=op_id).update(status=Status.RUNNING, heartbeat=timezone.now())
    scope = {**op.scope, "group": op.group}   # the operation's group, whatever its scope says
    started = time.monotonic()
    moved_this_run = 0
    kind = op.kind
    run = BulkRun(size=op.batch_size, actor=f"{op.action}-operation:{op_id}",
                  after=(op.cursor or None) if kind.keeps_cursor else None)
    try:
        while True:
            status = BulkOperation.objects.values_list("status", flat=True).get(pk=op_id)
            if status == Status.CANCELLED:
                _finish(op_id, Status.CANCELLED)
                return Status.CANCELLED
            examined, moved = kind.batch(op.topic, scope, run)
            moved_this_run += moved
            BulkOperation.objects.filter(pk=op_id).update(moved=F("moved") + moved, heartbeat=timezone.now(),
                                                          **({"cursor": run.after or ""} if kind.keeps_cursor else {}))
            if kind.finished(run, examined):
                break
            # Rate limit: never faster than rate_limit messages per second on average.
            ahead = moved_this_run / max(op.rate_limit, 1) - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
    except StateConflict as exc:
        BulkOperation.objects.filter(pk=op_id).update(failed=F("failed") + 1)
        _finish(op_id, Status.FAILED, str(exc))
        return Status.FAILED
    except Unavailable as exc:
        _finish(op_id, Status.FAILED, f"Redis failed: {exc}; start the operation again to resume it.")
        return Status.FAILED
    except NotReplicated as exc:
        # Replays are compare-and-set: starting again resumes without replaying anything twice.
        BulkOperation.objects.filter(pk=op_id).update(moved=F("moved") + len(exc.ids))
        _finish(op_id, Status.FAILED, f"{exc}; start the operation again to resume it once the replicas are back.")
        return Status.FAILED
    except QueueError as exc:
        # Any other refusal (a backfill's publish refused by the topic's limits, say): said on the
        # operation's page and in its audit, instead of a task that dies and is resumed forever.
        _finish(op_id, Status.FAILED, f"The engine refused: {exc}.")
        return Status.FAILED
    _finish(op_id, Status.DONE)
    return Status.DONE


def _finish(op_id: int, status: str, error: str = "") -> None:
    op = BulkOperation.objects.get(pk=op_id)
    op.status = status
    op.finished = timezone.now()
    op.error = error
    if status == Status.DONE and not op.scope.get("count_is_lower_bound"):
        # What the preview counted but was no longer dead when reached (replayed or deleted by
        # someone else meanwhile) is reported as skipped.
        op.skipped = max(0, op.total - op.moved - op.failed)
    op.save(update_fields=["status", "finished", "error", "skipped"])
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
        BulkOperation.objects.filter(pk=op_id).update(heartbeat=timezone.now())  # one resume per stall
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
