"""Delayed Celery tasks: python -m bench.celery_bridge [--quick] [--write]

Celery's countdown through delayq (queue_core.contrib.celery_bridge, with its forwarder) beside Celery's
own countdown, on one Redis with the broker's visibility_timeout at 5 s and 2 Celery worker
processes of 4 threads each:

- duplicates: tasks with countdowns of 1-20 s; executions per task, counted until 10 s after the
  last due time;
- lateness: tasks due at 200 per second (countdown 1-2 s) for 10 s; task start - due time;
- memory: tasks with a 600 s countdown; the Celery workers' RSS, and Redis bytes per waiting task.
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.engine import machine, write_section
from bench.procstat import tree_usage
from queue_core.contrib import localserver

ROOT = Path(__file__).resolve().parent.parent


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


class Mode:
    def __init__(self, name: str, server):
        self.name, self.server = name, server
        self.env = {**os.environ, "BENCH_CELERY_MODE": name, "BENCH_REDIS": server.url.rsplit("/", 1)[0],
                    "PYTHONPATH": str(ROOT)}
        os.environ.update(BENCH_CELERY_MODE=name, BENCH_REDIS=self.env["BENCH_REDIS"])
        sys.modules.pop("bench.celery_app", None)
        import bench.celery_app as module

        self.module = module
        self.procs = []
        self.log = server.client(db=2)

    def start(self):
        for db in (0, 1, 2):
            self.server.client(db=db).flushdb()
        for i in range(2):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "bench.celery_app", "worker", "--pool", "threads",
                 "--concurrency", "4", "-l", "error", "--without-gossip", "--without-mingle", "-n", f"w{i}@%h"],
                cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if self.name == "bridge":
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "queue_core", "--url", f"{self.env['BENCH_REDIS']}/0", "celery-forwarder",
                 "--app", "bench.celery_app:app", "--concurrency", "4"],
                cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while len(self.module.app.control.ping(timeout=0.5)) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("celery workers did not start")
        time.sleep(1)   # the forwarder's first claim (it has no ping)

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []

    def runs(self):
        """(task, due ms, start ms, forwarded ms or 0) per execution."""
        return [tuple(int(x) for x in r.decode().split("|")) for r in self.log.lrange("ran", 0, -1)]

    def send(self, n, countdown):
        due = int((time.time() + countdown) * 1000)
        self.module.record.apply_async(args=[n, due], countdown=countdown)
        return due

    def worker_rss(self):
        return sum(tree_usage(p.pid)[1] for p in self.procs[:2])


def duplicates(mode: Mode, n: int, rng) -> tuple[int, int, int, float]:
    mode.start()
    try:
        last_due = max(mode.send(i, rng.uniform(1, 20)) for i in range(n))
        while len({r[0] for r in mode.runs()}) < n and time.time() * 1000 < last_due + 60_000:
            time.sleep(0.2)
        time.sleep(max(0.0, (last_due + 10_000) / 1000 - time.time()))
        runs = mode.runs()
    finally:
        mode.stop()
    per_task = {}
    for task, *_ in runs:
        per_task[task] = per_task.get(task, 0) + 1
    early = sum(1 for _, due, ran, _ in runs if ran < due)
    return len(runs), sum(c - 1 for c in per_task.values()), n - len(per_task), early


def lateness(mode: Mode, seconds: int, rate: int, rng) -> list[int]:
    mode.start()
    try:
        t0, sent = time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            target = int((time.monotonic() - t0) * rate)
            while sent < target:
                mode.send(sent, rng.uniform(1, 2))
                sent += 1
            time.sleep(0.002)
        deadline = time.monotonic() + 30
        while len(mode.runs()) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        runs = mode.runs()
    finally:
        mode.stop()
    return [ran - due for _, due, ran, _ in runs], [fwd - due for _, due, _, fwd in runs if fwd]


def memory(mode: Mode, n: int) -> tuple[int, int, float]:
    mode.start()
    try:
        idle = mode.worker_rss()
        used0 = int(mode.server.client(db=0).info("memory")["used_memory"])
        for i in range(n):
            mode.send(i, 600)
        time.sleep(5)    # native: the workers prefetch the ETA tasks
        rss = mode.worker_rss()
        used = int(mode.server.client(db=0).info("memory")["used_memory"]) - used0
        payload = 0
        if mode.name == "bridge":   # what the task itself weighs as delayq stores it (record + headers)
            from queue_core import DelayQueue

            q = DelayQueue.from_url(f"{mode.env['BENCH_REDIS']}/0")
            [m] = q.peek("celery.celery", "pending", limit=1)
            payload = len(q.redis.hget(q.keys("celery.celery").msgs, m.id) or b"")
    finally:
        mode.stop()
    return idle, rss, used / n, payload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer tasks")
    parser.add_argument("--write", action="store_true", help="record the results in bench/RESULTS.md")
    args = parser.parse_args()
    n_dup, n_mem = (500, 10_000) if args.quick else (2000, 50_000)
    tmp = tempfile.mkdtemp(prefix="delayq-bench-celery-")
    server = localserver.start(data_dir=tmp)
    rows = []

    def row(name, value, note=""):
        rows.append((name, value, note))
        print(f"  {name:<60} {value:>22}  {note}", flush=True)
    print(f"delayed Celery tasks, {machine()}\n", flush=True)
    try:
        for name in ("bridge", "native"):
            label = "through delayq" if name == "bridge" else "Celery's own countdown"
            mode = Mode(name, server)
            total, extra, missing, early = duplicates(mode, n_dup, random.Random(1))
            row(f"{label}: {n_dup:,} tasks, countdown 1-20 s", f"{total:,} runs",
                f"{extra} duplicate runs, {missing} never ran, {early} early (broker visibility_timeout 5 s)")
            late, forwarded = lateness(mode, 10, 200, random.Random(2))
            # Handed over ``lead`` before the due time (negative: early, with the task's ETA kept).
            split = (f"; handed to the broker at due time {percentile(forwarded, 50):+} ms (p50) / "
                     f"{percentile(forwarded, 99):+} ms (p99)" if forwarded else "")
            row(f"{label}: lateness at 200 tasks/s", f"p50 {percentile(late, 50)} / p99 {percentile(late, 99)} ms",
                f"max {max(late) if late else 'n/a'} ms; task start - due, {len(late):,} runs{split}")
            idle, rss, per_task, payload = memory(mode, n_mem)
            stored = f" (the task's record, Celery headers and body, is {payload:,} B of it)" if payload else ""
            row(f"{label}: {n_mem:,} tasks waiting (countdown 600 s)", f"workers {rss / 2**20:.0f} MiB",
                f"idle {idle / 2**20:.0f} MiB; Redis {per_task:,.0f} B per waiting task{stored}")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_section("celery", "Delayed Celery tasks (`python -m bench.celery_bridge`)",
                      f"Run on {machine()}; one Redis, 2 Celery worker processes x 4 threads, broker "
                      "visibility_timeout 5 s; the delayq rows include the forwarder.", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
