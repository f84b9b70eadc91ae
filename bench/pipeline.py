"""Analytics job benchmark: python -m bench.pipeline [--events N] [--write]

Generates a realistic archive (default 10,000,000 events: 4 topics over 2 days, one of them with
two consumer groups; most messages published -> claimed -> acked in each group, some retried, some
dead-lettered and later replayed) with the
archiver's own schema, file layout and names (each topic's events in stream order, a file per
250,000 entries of one date), plus the first 1,000 entries of one file written again under their
own range (a re-read batch that differed, which the job must de-duplicate), then times
``python -m delayq_analytics.run`` end to end with local[*] and samples the peak memory of the job's
process tree (Python driver + JVM). Finally compares the job's approximate lateness percentiles
with exact ones computed here for a sample of minutes.

The same run also times the job over a small archive (default 200,000 events: what "Run analytics
now" sees after a few minutes of traffic) beside the bare floor, a default Spark session that only
reads, counts and groups those files: on small archives the job's cost is Spark's fixed cost. The
small archive runs twice: first as the first run after an install (no JVM class archive), then,
after the class archive is written (timed), as every later run; the large one runs with it.
"""

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from delayq_analytics.archiver import entry_of, partition_dir, write_file
from delayq_analytics.class_archive import ENV as CLASS_ENV
from delayq_analytics.files import file_name
from delayq_analytics.schema import ARROW_SCHEMA

from .engine import machine, write_section
from .procstat import tree_usage

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_794_787_200_000            # 2026-11-16 00:00 UTC
SPAN_MS = 2 * 86_400_000
TOPICS = ("orders", "emails", "webhooks", "billing")
GROUPS = {"orders": ("default", "audit")}   # a topic's consumer groups; the others have "default" only
FLUSH = 250_000
DUPLICATED = 1_000
SAMPLE_MINUTES = 20
TARGET = 200_000
SMALL_TARGET = 1.5


class Writer:
    """Collects each topic's events and writes them as the archiver does: in stream order (by
    time), a file per run of entries within one UTC date, named by its first and last entry."""

    COLUMNS = ("seq", "event", "msg", "ts", "attempt", "due", "lateness_ms", "handler_ms", "fp", "next", "group")

    def __init__(self, root: str):
        self.root = root
        self.topics = defaultdict(lambda: {name: [] for name in self.COLUMNS})
        self.rows = 0
        self.files = 0
        self.first_file = None

    def add(self, topic, seq, event, msg, ts, attempt, due=None, lateness=None, handler=None, fp=None,
            nxt=None, group="default"):
        """``seq``: the event's entry sequence number (its stream entry id is "<ts>-<seq>")."""
        cols = self.topics[topic]
        for name, value in zip(self.COLUMNS, (seq, event, msg, ts, attempt, due, lateness, handler, fp, nxt,
                                              None if event == "published" else group), strict=True):
            cols[name].append(value)
        self.rows += 1

    def close(self):
        for topic in sorted(self.topics):
            self._write_topic(topic, pa.Table.from_pydict(self.topics.pop(topic)).sort_by([("ts", "ascending"),
                                                                                           ("seq", "ascending")]))

    def _write_topic(self, topic, table):
        entry = pc.binary_join_element_wise(pc.cast(table["ts"], pa.string()), pc.cast(table["seq"], pa.string()),
                                            "-")
        dates = pc.strftime(pc.cast(table["ts"], pa.timestamp("ms", tz="UTC")), format="%Y-%m-%d")
        n = table.num_rows
        columns = {"event_id": pc.binary_join_element_wise("0", entry, "0", "-"), "event": table["event"],
                   "msg": table["msg"], "ts": table["ts"], "attempt": table["attempt"], "due": table["due"],
                   "lateness_ms": table["lateness_ms"], "handler_ms": table["handler_ms"], "fp": table["fp"],
                   "next": table["next"], "actor": pa.array(["bench"] * n), "from_state": pa.nulls(n, pa.string()),
                   "reason": pa.nulls(n, pa.string()), "meta": pa.nulls(n, pa.string()),
                   "payload": pa.nulls(n, pa.binary()), "extra": pa.nulls(n, pa.string()), "group": table["group"],
                   "partition": pa.array([0] * n, pa.int32())}
        full = pa.Table.from_pydict(columns).cast(ARROW_SCHEMA)
        entries, dates = entry.to_pylist(), dates.to_pylist()
        start = 0
        while start < n:   # one file per FLUSH rows of one date, as archiver batches are
            end = min(start + FLUSH, n)
            while dates[end - 1] != dates[start]:
                end -= 1
            path = write_file(partition_dir(self.root, dates[start], topic),
                              file_name(0, entries[start], entries[end - 1]), full.slice(start, end - start))
            self.first_file = self.first_file or path
            self.files += 1
            start = end


def lifecycle(w, rng, topic, group, msg, due, eid, fp, sample_minutes, exact) -> None:
    """One message's claims, failures, death, replay and ack in one consumer group."""
    roll = rng.random()
    failures = 0 if roll < 0.88 else 1 if roll < 0.98 else 3
    attempt, t = 1, due
    while True:
        late = int(rng.expovariate(1 / 3))
        claim = t + late
        w.add(topic, eid(claim), "claimed", msg, claim, attempt, due=t, lateness=late, group=group)
        if attempt == 1 and topic == "orders" and claim - claim % 60_000 in sample_minutes:
            exact[(topic, claim - claim % 60_000)].append(late)
        handler = int(rng.expovariate(1 / 20))
        end = claim + handler
        if attempt <= failures:
            last = attempt == 3
            w.add(topic, eid(end), "nacked", msg, end, attempt, handler=handler, fp=fp,
                  nxt="dead" if last else "retrying", group=group)
            if last:
                w.add(topic, eid(end), "dead", msg, end, attempt, fp=fp, group=group)
                if rng.random() < 0.5:   # an operator replays it an hour later
                    replay = end + 3_600_000
                    w.add(topic, eid(replay), "replayed", msg, replay, 0, due=replay, group=group)
                    failures, attempt, t = (0 if rng.random() < 0.7 else 3), 1, replay
                    continue
                return
            attempt, t = attempt + 1, end + 1_000
            continue
        w.add(topic, eid(end), "acked", msg, end, attempt, handler=handler, group=group)
        return


def generate(root: str, target_events: int, seed: int = 7) -> dict:
    """Write about ``target_events`` events; returns exact first-attempt lateness for a sample
    of (topic, minute) keys."""
    rng = random.Random(seed)
    w = Writer(root)
    seq = defaultdict(int)
    sample_minutes = {T0 + 60_000 * rng.randrange(SPAN_MS // 60_000 - 10) for _ in range(SAMPLE_MINUTES)}
    exact: dict[tuple[str, int], list[int]] = defaultdict(list)
    fps = [f"fp{i:02d}" for i in range(12)]
    n = 0
    while w.rows < target_events:
        n += 1
        topic = TOPICS[n % len(TOPICS)]

        def eid(ts, _topic=topic):
            seq[_topic] += 1
            return seq[_topic]
        msg = f"m{n:09d}"
        pub = T0 + rng.randrange(SPAN_MS - 3_600_000)
        due = pub if rng.random() < 0.5 else pub + rng.randrange(60_000)
        w.add(topic, eid(pub), "published", msg, pub, 0, due=due)
        for group in GROUPS.get(topic, ("default",)):     # every group of the topic gets the message
            lifecycle(w, rng, topic, group, msg, due, eid, fps[n % len(fps)], sample_minutes, exact)
    w.close()
    # Part of a batch archived twice: a re-read after a crash that differed from the first read
    # (the stream trimmed some of its entries meanwhile, or an older archiver re-read with another
    # batch size) wrote the first entries of a file again, under their own range. The files'
    # ranges overlap, so the job must de-duplicate those two files.
    first = pq.read_table(w.first_file)
    again = first.slice(0, DUPLICATED)
    ids = again["event_id"].to_pylist()
    write_file(os.path.dirname(w.first_file), file_name(0, entry_of(ids[0]), entry_of(ids[-1])), again)
    return {"events": w.rows, "files": w.files + 1, "messages": n, "exact": exact, "duplicates": DUPLICATED}


def run_job(archive: str, out: str, classes: str) -> tuple[float, int, dict]:
    """One CLI run; ``classes``: its class-archive folder (DELAYQ_SPARK_CLASS_ARCHIVE), or off."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", CLASS_ENV: classes}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "delayq_analytics.run", "--archive", archive, "--out", out,
                             "--progress", "json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, tree_usage(proc.pid)[1])
            time.sleep(0.2)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    summary = {}
    for line in proc.stdout:
        step = json.loads(line)
        print(f"  [{step['step']}/{step['steps']}] {step['stage']} at {step['elapsed']} s", flush=True)
        summary = step
    proc.wait()
    stop.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"the job failed (exit {proc.returncode})")
    return time.monotonic() - started, peak, summary


def nearest_rank(values, q):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def accuracy(out: str, exact: dict) -> tuple[int, int, float]:
    """(minutes compared, values compared, largest rank error as a fraction of the minute's count)."""
    timings = ds.dataset(os.path.join(out, "timings"), partitioning="hive").to_table(
        filter=(ds.field("measure") == "lateness") & (ds.field("topic") == "orders")
        & (ds.field("group") == "*")).to_pylist()   # orders over its two groups
    by_key = {(r["topic"], int(r["minute"].timestamp() * 1000)): r for r in timings}
    compared, worst = 0, 0.0
    for key, values in exact.items():
        row = by_key[key]
        ordered = sorted(values)
        for q, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            got = row[name]
            want = nearest_rank(values, q)
            compared += 1
            if got != want:   # how far, in ranks, is the returned value from the exact one?
                lo = sum(1 for v in ordered if v < got)
                hi = sum(1 for v in ordered if v <= got)
                rank = math.ceil(q * len(ordered))
                worst = max(worst, min(abs(rank - lo), abs(rank - hi)) / len(ordered))
    return len(exact), compared, worst


FLOOR = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[*]").getOrCreate()
events = spark.read.parquet(sys.argv[1])
events.count()
events.groupBy("topic").count().collect()
spark.stop()
"""


def write_class_archive(classes: str) -> float:
    """What a run without a class archive starts in the background, in the foreground: seconds."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", CLASS_ENV: classes}
    shutil.rmtree(classes, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "delayq_analytics.class_archive"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    return time.monotonic() - started


def floor_seconds(archive: str) -> float:
    """The bare floor: a default Spark session that reads the archive, counts it and groups it by
    topic, end to end (the least any Spark job over these files costs here)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOR, archive], env=env, check=True, capture_output=True)
    return time.monotonic() - started


def prepare(work: Path, events: int, keep: bool) -> tuple[Path, dict, float]:
    """Generate (or, with --keep, reuse) an archive of about ``events`` events under ``work``."""
    archive = work / "archive"
    print(f"generating ~{events:,} events into {archive} ...", flush=True)
    t = time.monotonic()
    saved = work / "generated.json"
    if keep and saved.exists() and json.loads(saved.read_text())["requested"] == events:
        gen = json.loads(saved.read_text())     # the same seed would generate the same archive
        gen["exact"] = {tuple(json.loads(k)): v for k, v in gen["exact"].items()}
    else:
        shutil.rmtree(archive, ignore_errors=True)
        gen = generate(str(archive), events)
        saved.write_text(json.dumps({**gen, "requested": events,
                                     "exact": {json.dumps(k): v for k, v in gen["exact"].items()}}))
    size = sum(f.stat().st_size for f in archive.rglob("*.parquet"))
    print(f"  {gen['events']:,} events, {gen['files']} files, {size / 2**20:.0f} MiB in {time.monotonic() - t:.0f} s")
    return archive, gen, size


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=200_000, help="the small archive (an operator's button press)")
    parser.add_argument("--keep", help="generate into this folder (reused if it exists) instead of a temp dir")
    parser.add_argument("--write", action="store_true", help="record the results in bench/RESULTS.md")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="delayq-bench-pipeline-"))
    try:
        small_archive, small_gen, small_size = prepare(work / f"{args.small}", args.small, bool(args.keep))
        archive, gen, size = prepare(work / f"{args.events}", args.events, bool(args.keep))
        floor = floor_seconds(str(small_archive))
        print(f"  bare floor over the small archive: {floor:.1f} s", flush=True)
        small_out = work / f"{args.small}" / "out"
        shutil.rmtree(small_out, ignore_errors=True)
        first_s, _, _ = run_job(str(small_archive), str(small_out), "off")
        print(f"  small archive, no class archive (a first run): {first_s:.1f} s", flush=True)
        classes = str(work / "class-archive")
        writing_s = write_class_archive(classes)
        print(f"  class archive written in {writing_s:.1f} s", flush=True)
        shutil.rmtree(small_out, ignore_errors=True)
        small_s, _, _ = run_job(str(small_archive), str(small_out), classes)
        out = work / f"{args.events}" / "out"
        shutil.rmtree(out, ignore_errors=True)
        seconds, peak, summary = run_job(str(archive), str(out), classes)
        rate = gen["events"] / seconds
        minutes, compared, worst = accuracy(str(out), gen["exact"])
        rows = [
            ("small archive", f"{small_gen['events']:,} events", f"{small_gen['files']} Parquet files, "
                                                                 f"{small_size / 2**20:.0f} MiB"),
            ("bare floor over the small archive", f"{floor:.1f} s",
             "default Spark session: read, count, group by topic, end to end"),
            ("job over the small archive", f"{small_s:.1f} s",
             f"{small_s / floor:.2f}x the floor (target <= {SMALL_TARGET}x); the driver JVM starts from the class "
             f"archive"),
            ("the same, first run after an install", f"{first_s:.1f} s",
             f"{first_s / floor:.2f}x the floor: no class archive yet (one is then written in the background)"),
            ("writing the class archive", f"{writing_s:.1f} s",
             "once per Java and Spark version, detached from the run that lacked it"),
            ("large archive", f"{gen['events']:,} events",
             f"{gen['messages']:,} messages, 4 topics (orders with 2 groups), 2 days, "
             f"{gen['files']} Parquet files, {size / 2**20:.0f} MiB"),
            ("job end to end (delayq-analytics)", f"{seconds:.1f} s", "JVM start, read, dedupe, 4 outputs written"),
            ("throughput", f"{rate:,.0f} events/s", f"target >= {TARGET:,}"),
            ("Spark's own time (extract to done)", f"{summary.get('elapsed', 0):.1f} s", "without JVM start-up"),
            ("peak memory, driver + JVM", f"{peak / 2**20:,.0f} MiB", "RSS of the process tree, sampled 5/s"),
            ("duplicates dropped", f"{summary.get('duplicates', 0):,}",
             f"one batch archived twice ({gen['duplicates']:,} events)"),
            ("percentile accuracy (lateness)", "exact" if worst == 0 else f"worst rank error {worst:.4%}",
             f"{compared} p50/p95/p99 values over {minutes} sampled minutes vs exact nearest-rank"),
        ]
        for name, value, note in rows:
            print(f"{name:45} {value:>22}  {note}")
        if args.write:
            import pyspark
            write_section("pipeline", "Analytics job (`python -m bench.pipeline`)",
                          f"Run on {machine()}; Spark {pyspark.__version__} local[*], driver memory 2g, the parallel "
                          f"collector; the job picks 16 shuffle partitions and the full JIT for the large archive, "
                          f"one partition per core (at most 4) and the quick JIT (C1) below 32 MiB.", rows)
        return 0 if rate >= TARGET and small_s <= SMALL_TARGET * floor else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
