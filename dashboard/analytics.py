"""Analytics runs: start the Spark job, follow its progress, load its outputs into the tables.

The job runs as a child process (``python -m delayq_analytics.run --progress json``): Spark's JVM lives
and dies with it, a crash of the job cannot take the Celery worker along, and each progress line
it prints becomes the run's stage and heartbeat.
"""

import importlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import IntegrityError, transaction
from django.utils import timezone

from delayq_analytics.counts import COUNT_COLUMNS

from . import audit, conf
from .models import AnalyticsRun, AttemptStat, ErrorGroupStat, LateCauseStat, MinuteStat, TimingStat
from .services.archive import archive_dir, run_archiver

log = logging.getLogger("delayq.analytics")
Status = AnalyticsRun.Status
STALE_AFTER = timedelta(minutes=30)   # no progress line for this long: the worker running it died
JOB_STEPS = 7                         # extract, five outputs, done (delayq_analytics.run)
LOAD_STEP = JOB_STEPS + 1
# Runs someone started by hand archive what the streams hold first, so the charts include events up
# to the click (the beat archiver lets a quiet topic's events wait up to DELAYQ_ARCHIVE_MAX_WAIT).
ARCHIVE_FIRST = {"manual", "command"}
ARCHIVE_FIRST_DEADLINE_S = 120


class RunRefused(RuntimeError):
    pass


def fail_stale_runs() -> int:
    cutoff = timezone.now() - STALE_AFTER
    stale = AnalyticsRun.objects.filter(active=True, heartbeat__lt=cutoff) | AnalyticsRun.objects.filter(
        active=True, heartbeat__isnull=True, created__lt=cutoff)
    return stale.update(status=Status.FAILED, active=False, finished=timezone.now(),
                        error="no progress for 30 minutes: the worker running it stopped. Start a new run.")


def default_since() -> datetime:
    """Scheduled and button runs recompute the last DELAYQ_ANALYTICS_DAYS days (whole UTC days)."""
    return timezone.now() - timedelta(days=conf.analytics_days())


def missing_extra() -> str | None:
    """What is missing to run the job in this environment (the ``analytics`` extra), or None."""
    missing = []
    for module in ("pyspark", "pyarrow"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        return (f"the analytics job needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
                "installed: pip install 'delayq[analytics]' (and Java 17 for Spark)")
    return None


def create_run(user=None, *, trigger: str = "manual", since: datetime | None = None,
               until: datetime | None = None) -> AnalyticsRun:
    """A new pending run, or RunRefused when one is already pending or running, or the analytics
    extra is not installed."""
    if problem := missing_extra():
        raise RunRefused(problem)
    fail_stale_runs()
    try:
        with transaction.atomic():
            run = AnalyticsRun.objects.create(created_by=user if user and user.is_authenticated else None,
                                              trigger=trigger, since=since, until=until, steps=LOAD_STEP)
    except IntegrityError:
        current = AnalyticsRun.objects.filter(active=True).first()
        raise RunRefused(f"analytics run #{current.pk if current else '?'} is already {current.status if current else 'active'};"
                         f" wait for it to finish") from None
    audit.record(user, "analytics.run", scope={"since": str(since or ""), "until": str(until or ""),
                                               "trigger": trigger}, detail=f"analytics run #{run.pk} queued")
    return run


def _update(run_id: int, **fields) -> None:
    AnalyticsRun.objects.filter(pk=run_id).update(heartbeat=timezone.now(), **fields)


def execute(run_id: int) -> AnalyticsRun:
    """Run the job for ``run_id`` and load its outputs; every failure ends on the run with a reason."""
    run = AnalyticsRun.objects.get(pk=run_id)
    if run.status != Status.PENDING:
        return run
    _update(run_id, status=Status.RUNNING, started=timezone.now(), stage="starting Spark")
    try:
        if run.trigger in ARCHIVE_FIRST:
            _archive_first(run_id)
            _update(run_id, stage="starting Spark")
        summary = _run_job(run)
        _update(run_id, step=LOAD_STEP - 1, stage="loading")
        loaded = load_outputs(conf.analytics_dir(), summary)
    except Exception as exc:  # the run records why; nothing is left half-loaded (load is atomic)
        log.exception("analytics run %s failed", run_id)
        _update(run_id, status=Status.FAILED, active=False, finished=timezone.now(), error=str(exc)[:5000])
    else:
        _update(run_id, status=Status.DONE, active=False, finished=timezone.now(), step=LOAD_STEP, stage="done",
                events=summary["events"], duplicates=summary["duplicates"], late_causes=loaded["late_causes"] is not None)
    return AnalyticsRun.objects.get(pk=run_id)


def _archive_first(run_id: int) -> None:
    """Archive everything the streams hold, in bounded archiver runs, until one finds nothing new.
    A beat archiver holding the lock is waited for; a deadline keeps a huge backlog from holding
    the run forever (the job then covers what was archived, and the next run the rest)."""
    deadline = time.monotonic() + ARCHIVE_FIRST_DEADLINE_S
    archived = 0
    while time.monotonic() < deadline:
        _update(run_id, stage=f"archiving events ({archived:,} so far)")
        report = run_archiver(flush=True)
        if report.skipped:        # the beat archiver is running now: it finishes within seconds
            time.sleep(0.2)
            continue
        archived += report.archived
        if report.archived == 0:
            return
    log.warning("analytics run %s: still archiving after %s s; the job covers what was archived so far",
                run_id, ARCHIVE_FIRST_DEADLINE_S)


def _run_job(run: AnalyticsRun) -> dict:
    """The job's own checks (archive present, Java 17) fail fast, before Spark starts; their
    message ends up in the run's error."""
    cmd = [sys.executable, "-m", "delayq_analytics.run", "--archive", archive_dir(), "--out", conf.analytics_dir(),
           "--progress", "json"]
    for flag, value in (("--since", run.since), ("--until", run.until)):
        if value:
            cmd += [flag, value.astimezone(UTC).isoformat()]
    # SPARK_LOCAL_IP is left to the job: loopback suits a local master only (delayq_analytics.spark).
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    summary = None
    errors: deque[str] = deque(maxlen=20)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        drain = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)
        drain.start()
        for line in proc.stdout:
            try:
                step = json.loads(line)
            except ValueError:
                continue
            _update(run.pk, step=min(step["step"], LOAD_STEP - 1), stage=step["stage"])
            if step["stage"] == "done":
                summary = step
        proc.wait()
        drain.join(timeout=5)
    if proc.returncode != 0 or summary is None:
        tail = "".join(line for line in errors if line.strip()).strip()
        reason = tail.splitlines()[-1] if tail else f"exit code {proc.returncode}"
        raise RuntimeError(f"the Spark job failed: {reason.removeprefix('error: ')}")
    return summary


def _read(out: str, name: str) -> list[dict]:
    import pyarrow.dataset as ds

    path = os.path.join(out, name)
    if not os.path.isdir(path):
        return []
    return ds.dataset(path, format="parquet", partitioning="hive").to_table().to_pylist()


def _ms_to_dt(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None


def _group(row: dict) -> str:
    # Outputs of a job from before groups have no group column: they are the topic's totals.
    return row.get("group") or "*"


def load_outputs(out: str, summary: dict) -> dict[str, int | None]:
    """Replace the tables' rows for the job's window with its outputs, in one transaction. An output
    an older job did not write loads as no rows (``late_causes``: None in the counts returned)."""
    since, until = _ms_to_dt(summary.get("since_ms")), _ms_to_dt(summary.get("until_ms"))
    minutes = _read(out, "minute_counts")
    timings = _read(out, "timings")
    has_causes = os.path.isdir(os.path.join(out, "late_causes"))
    causes = _read(out, "late_causes")
    in_window = {}
    if since:
        in_window["minute__gte"] = since
    if until:
        in_window["minute__lt"] = until

    def keep(row):
        m = row["minute"]
        return (not since or m >= since) and (not until or m < until)

    with transaction.atomic():
        MinuteStat.objects.filter(**in_window).delete()
        MinuteStat.objects.bulk_create(
            [MinuteStat(topic=r["topic"], group=_group(r), minute=r["minute"], **{c: r[c] for c in COUNT_COLUMNS})
             for r in minutes if keep(r)], batch_size=2000)
        TimingStat.objects.filter(**in_window).delete()
        TimingStat.objects.bulk_create(
            [TimingStat(topic=r["topic"], group=_group(r), minute=r["minute"], measure=r["measure"], count=r["count"], p50=r["p50"],
                        p95=r["p95"], p99=r["p99"], max=r["max"]) for r in timings if keep(r)], batch_size=2000)
        LateCauseStat.objects.filter(**in_window).delete()
        LateCauseStat.objects.bulk_create(
            [LateCauseStat(topic=r["topic"], group=_group(r), minute=r["minute"], cause=r["cause"],
                           deliveries=r["deliveries"], max_ms=r["max_ms"]) for r in causes if keep(r)], batch_size=2000)
        AttemptStat.objects.all().delete()
        AttemptStat.objects.bulk_create([AttemptStat(topic=r["topic"], group=_group(r), attempts=r["attempt"],
                                                     messages=r["messages"]) for r in _read(out, "attempts")])
        ErrorGroupStat.objects.all().delete()
        ErrorGroupStat.objects.bulk_create(
            [ErrorGroupStat(topic=r["topic"], group=_group(r), fingerprint=r["fp"] or "", dead=r["dead"], first_seen=r["first_seen"],
                            last_seen=r["last_seen"], sample_ids=list(r["sample_ids"] or []), replayed=r["replayed"],
                            replay_succeeded=r["replay_succeeded"]) for r in _read(out, "error_groups")])
    return {"minutes": len(minutes), "timings": len(timings), "late_causes": len(causes) if has_causes else None}
