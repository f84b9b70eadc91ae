"""The analytics job: archived events -> Parquet outputs the dashboard loads.

    delayq-analytics --archive DIR --out DIR [--since ISO] [--until ISO] [--master URL]
    (the same: python -m delayq_analytics.run ...)
    spark-submit --master URL "$(delayq-analytics --job-path)" --archive DIR --out DIR

The job uses DataFrame operations only, so executors need Spark and no delayq code. Extract
(explicit schema, date partitions pruned), pure transforms (delayq_analytics.transforms), load
(Parquet under --out, one folder per output).

Re-runs never double count: the per-minute outputs are partitioned by date and the window is
widened to whole UTC days, so each run replaces exactly the days it covers (dynamic partition
overwrite); the window-wide outputs (attempts, error_groups) are replaced whole. ``summary.json``
is written last and says which window the outputs describe.
"""

import argparse
import json
import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

if __package__ in (None, ""):   # `spark-submit delayq_analytics/run.py`: make the package importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from delayq_analytics import files as archive_names  # noqa: E402
from delayq_analytics.schema import spark_schema  # noqa: E402
from delayq_analytics.times import parse_time  # noqa: E402,F401 - the CLI's --since/--until

# pyspark is imported inside the functions that use it: `parse_time` and the CLI's errors serve the
# dashboard's commands in processes without Spark.

OUTPUTS = ("minute_counts", "timings", "attempts", "error_groups", "late_causes")
BY_DATE = {"minute_counts", "timings", "late_causes"}
# Columns the transforms read: the payload and metadata of evicted messages stay on disk.
NEEDED = ("topic", "group", "date", "event_id", "event", "msg", "ts", "attempt", "lateness_ms", "handler_ms", "fp",
          "next", "extra")   # extra: the claims' lateness_cause (late_causes)


def whole_days(since: datetime | None, until: datetime | None) -> tuple[datetime | None, datetime | None]:
    """Widen to UTC midnights: outputs are replaced a day at a time."""
    def floor(t):
        return t.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = floor(since) if since else None
    end = None
    if until:
        end = floor(until)
        if end != until.astimezone(UTC):
            end += timedelta(days=1)
    return start, end


def _ms(t: datetime | None) -> int | None:
    return int(t.timestamp() * 1000) if t else None


class Progress:
    """One line per step on stdout; ``--progress json`` makes them JSON for the dashboard's task."""

    def __init__(self, steps: int, as_json: bool):
        self.steps, self.step, self.as_json = steps, 0, as_json
        self.started = time.monotonic()

    def __call__(self, stage: str, **extra) -> None:
        self.step += 1
        elapsed = round(time.monotonic() - self.started, 2)
        if self.as_json:
            print(json.dumps({"step": self.step, "steps": self.steps, "stage": stage, "elapsed": elapsed, **extra}),
                  flush=True)
        else:
            print(f"[{self.step}/{self.steps}] {stage} ({elapsed:.1f} s)", flush=True)


def extract(spark, archive: str, since_ms: int | None, until_ms: int | None):
    """Read the archive with its explicit schema; date partitions outside the window are pruned
    before any file is opened. Returns (events, which events may be archived twice: see
    transforms.minute_cube)."""
    from pyspark.sql import functions as F

    from delayq_analytics import transforms

    events = spark.read.schema(spark_schema()).option("basePath", archive).parquet(archive)
    may_repeat = repeat_filter(events.inputFiles())
    columns = list(NEEDED)
    if not isinstance(may_repeat, bool):   # a Column naming files: it reads each row's file name
        events = events.withColumn("_file", F.col("_metadata.file_name"))
        columns.append("_file")
    if since_ms is not None:
        events = events.where(F.col("date") >= F.to_date(F.timestamp_millis(F.lit(since_ms))))
    if until_ms is not None:
        events = events.where(F.col("date") <= F.to_date(F.timestamp_millis(F.lit(until_ms))))
    return transforms.in_window(events.select(*columns), since_ms, until_ms), may_repeat


def repeat_filter(paths: list[str]):
    """Which events may be in the archive twice: False (none), True (any: a file outside the
    archiver's layout overlaps another) or a Column over date, topic and ``_file`` naming the
    files whose entry ranges overlap (delayq_analytics.files)."""
    from pyspark.sql import functions as F

    overlapping = archive_names.overlapping_by_partition(paths)
    if not overlapping:
        return overlapping is None
    condition = F.lit(False)
    for (date, topic), names in sorted(overlapping.items()):
        condition = condition | ((F.col("date") == F.to_date(F.lit(date))) & (F.col("topic") == topic)
                                 & F.col("_file").isin(*sorted(names)))
    return condition


def archive_files(archive: str):
    """The archive's data files (not the archiver's hidden temp files)."""
    for dirpath, _dirs, files in os.walk(archive):
        for name in files:
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                yield os.path.join(dirpath, name)


def has_files(archive: str) -> bool:
    return next(archive_files(archive), None) is not None


def archive_bytes(archive: str) -> int | None:
    """The local archive's size (None for a URI: listing HDFS or S3 here would cost more than it saves)."""
    if "://" in archive:
        return None
    return sum(os.path.getsize(path) for path in archive_files(archive))


def run(spark, archive: str, out: str, since: datetime | None = None, until: datetime | None = None,
        progress: Progress | None = None) -> dict:
    from pyspark.sql import functions as F

    from delayq_analytics import transforms

    progress = progress or Progress(len(OUTPUTS) + 2, as_json=False)
    start, end = whole_days(since, until)
    since_ms, until_ms = _ms(start), _ms(end)
    began = time.monotonic()
    if "://" not in archive and not has_files(archive):
        raw, may_repeat = spark.createDataFrame([], spark_schema()).select(*NEEDED), False
    else:
        raw, may_repeat = extract(spark, archive, since_ms, until_ms)
    # Narrow and small: the one pass over every event.
    cube = transforms.minute_cube(raw, may_repeat).cache()
    totals = cube.agg(F.sum("n").alias("events"), F.sum("copies").alias("copies")).first()
    count, duplicates = int(totals["events"] or 0), int((totals["copies"] or 0) - (totals["events"] or 0))
    progress("extract", events=count, duplicates=duplicates)
    frames = {"minute_counts": lambda: transforms.counts_of(cube), "timings": lambda: transforms.timings_of(cube),
              "attempts": lambda: transforms.attempts_of(cube), "error_groups": lambda: transforms.error_groups(raw),
              "late_causes": lambda: transforms.late_causes(raw)}
    for name in OUTPUTS:
        writer = frames[name]().write.mode("overwrite")
        if name in BY_DATE:
            writer = writer.partitionBy("date")
        writer.parquet(os.path.join(out, name))
        progress(name)
    cube.unpersist()
    summary = {"since_ms": since_ms, "until_ms": until_ms, "events": count, "duplicates": duplicates,
               "outputs": list(OUTPUTS), "seconds": round(time.monotonic() - began, 3),
               "finished": datetime.now(UTC).isoformat()}
    temp = os.path.join(out, ".summary.json.tmp")
    os.makedirs(out, exist_ok=True)
    with open(temp, "w") as fh:
        json.dump(summary, fh, indent=2)
    os.replace(temp, os.path.join(out, "summary.json"))
    progress("done", **summary)
    return summary


CORRUPT_FILE = re.compile(r"(?:error while reading file|RuntimeException:) (\S+?\.parquet)\b")


def unreadable_file(exc: BaseException) -> str | None:
    """The archive file a failed read names, if the failure is one file Spark could not read."""
    match = CORRUPT_FILE.search(str(exc))
    if not match:
        return None
    path = match.group(1)
    return urlsplit(path).path if path.startswith("file:") else path


def corrupt_file_line(path: str, archive: str) -> str:
    return (f"error: the archive file {path} is not readable Parquet (damaged, or not written by the archiver); "
            f"nothing was written: move it out of {archive} (for example into a quarantine folder beside it) "
            f"and run the job again")


def job_path() -> str:
    """This file, as installed: what spark-submit takes (``spark-submit "$(delayq-analytics --job-path)" ...``)."""
    return os.path.abspath(__file__)


class _PrintJobPath(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(job_path())
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="delayq-analytics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", required=True, help="the event archive (DELAYQ_ARCHIVE_DIR)")
    parser.add_argument("--out", required=True, help="folder for the outputs (one sub-folder each)")
    parser.add_argument("--since", type=parse_time, help="ISO date/time, UTC unless an offset is given; "
                                                         "widened to the start of its day")
    parser.add_argument("--until", type=parse_time, help="ISO date/time (exclusive), widened to the end of its day")
    parser.add_argument("--master", help="Spark master URL (default $SPARK_MASTER, else the one spark-submit or "
                                         "spark-defaults.conf gives, else local[*])")
    parser.add_argument("--progress", choices=("text", "json"), default="text")
    parser.add_argument("--job-path", action=_PrintJobPath,
                        help="print the path of this job's file for spark-submit, and exit")
    args = parser.parse_args(argv)
    if args.since and args.until and args.since >= args.until:
        parser.error("--since must be before --until")
    if "://" not in args.archive and not os.path.isdir(args.archive):   # say so before Spark starts
        print(f"error: no archive at {args.archive}: run `manage.py dq_archive --once` first (or pass --archive)",
              file=sys.stderr)
        return 2
    from delayq_analytics.spark import JavaMissing, MasterUnreachable, session, stop
    try:
        spark = session(args.master, input_bytes=archive_bytes(args.archive), class_archive=True)
    except (JavaMissing, MasterUnreachable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    failure = None
    try:
        run(spark, args.archive, args.out, args.since, args.until, Progress(len(OUTPUTS) + 2, args.progress == "json"))
    except Exception as exc:
        path = unreadable_file(exc)
        if path is None:
            raise
        failure = corrupt_file_line(path, args.archive)
    finally:
        stop(spark)
    if failure:   # after stop(): the last line on stderr is what the dashboard shows
        print(failure, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
