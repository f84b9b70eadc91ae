"""Schedules (issue 34): exactly once and on time with several scheduler processes, SIGKILLs and
a Redis restart (AOF); then the Redis memory per schedule and the CPU of an idle scheduler.

    python -m bench.schedules [--schedules 20] [--every 0.1] [--seconds 60] [--burst 50]
                              [--burst-seconds 24] [--idle 100000] [--write]

Part 1: ``--schedules`` schedules every ``--every`` s, each its own phase (the issue's proof:
over 10,000 ticks at the defaults), then the burst: ``--burst`` schedules whose ticks fall in the
same millisecond. Each run: three ``delayq scheduler`` processes for its seconds; one is SIGKILLed
and restarted at 25% and another at 50% of the run; at 70% Redis is shut down (AOF, appendfsync
everysec) and started again on the same files. Every tick published is read back: duplicates (the
same schedule and tick twice), gaps (a tick missing between a schedule's first and last), the
schedules' ``missed`` counters, and lateness (the message's creation by Redis's clock minus its
tick), p50/p99/max, from one second after every schedule first fired, outside the restart's
window (one interval before the shutdown to two seconds after Redis is back), and p99 with it.

Part 2: ``--idle`` schedules, one tick a day each, their next ticks spread over the day, on a
topic of 6 partitions: Redis memory per schedule (used_memory before and after), then one
scheduler for 20 s: its CPU (process tree, /proc) and Redis's (INFO cpu), and the ticks it fired.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from bench.engine import replace_section
from bench.procstat import tree_usage
from queue_core import DelayQueue
from queue_core.contrib import localserver

ROOT = Path(__file__).resolve().parents[1]


def scheduler(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "queue_core", "scheduler", "--url", url], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def wait_redis(q: DelayQueue, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            q.redis.ping()
            return
        except Exception:  # noqa: BLE001 - a restarting server refuses connections for a moment
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def exactly_once(n: int, every: float, seconds: float, spread: bool = False) -> dict:
    """Part 1 (one run): the ticks read back, checked and timed."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-schedules-"))
    server = localserver.start(data_dir=tmp, appendonly=True)
    url = f"redis://127.0.0.1:{server.port}/0"
    q = DelayQueue.from_url(url)
    q.configure_topic("ticks", partitions=3)
    for i in range(n):
        # Aligned (the default): every schedule's ticks fall in the same millisecond, the burst a
        # minute boundary gives many cron schedules. Spread: each its own phase (start offset by
        # every/n), so each tick's lateness is the scheduler's alone.
        start = datetime.fromtimestamp(i * every / n, UTC) if spread else None
        q.upsert_schedule(f"s{i}", topic="ticks", every=every, catchup_window=30, start=start)
    procs = [scheduler(url) for _ in range(3)]
    # Lateness counts once the schedulers run: every schedule has fired, then one more second (three
    # Python processes starting on a busy machine can take seconds; the ticks due meanwhile are
    # fired late by the catch-up, which is not the steady lateness this measures).
    deadline = time.monotonic() + 60
    while min(s.runs for s in q.schedules()) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    steady = q.server_ms()
    start = time.monotonic()
    events, restart = [], (0, 0)

    def at(fraction):
        time.sleep(max(0.0, start + seconds * fraction - time.monotonic()))
    at(0.25)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait()
    procs[0] = scheduler(url)
    events.append("SIGKILL scheduler 1 at 25%, restarted")
    at(0.5)
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    procs[1] = scheduler(url)
    events.append("SIGKILL scheduler 2 at 50%, restarted")
    at(0.7)
    down = q.server_ms()
    port = server.port
    server.stop()                       # SHUTDOWN: the AOF is written out
    server = localserver.start(data_dir=tmp, appendonly=True, port=port)
    wait_redis(q)
    # The restart's window: from one interval before the shutdown (a tick due just before it may
    # still be on its way) to two seconds after Redis is back (the catch-up of the ticks due meanwhile).
    restart = (down - int(every * 1000), q.server_ms() + 2000)
    events.append(f"Redis restarted from its AOF at 70% ({(restart[1] - 2000 - down) / 1000:.1f} s down)")
    at(1.0)
    for i in range(n):
        q.pause_schedule(f"s{i}")
    for p in procs:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
    ticks, late, late_all = defaultdict(list), [], []
    while batch := q.claim("ticks", 1000):
        for d in batch:
            h = d.message.headers
            tick = int(h["delayq-tick"])
            ticks[h["delayq-schedule"]].append(tick)
            lateness = d.message.created_at.timestamp() * 1000 - tick
            if tick >= steady:
                late_all.append(lateness)
                if not restart[0] <= tick <= restart[1]:
                    late.append(lateness)
        q.ack_many(batch)
    step = int(every * 1000)
    dupes = sum(len(v) - len(set(v)) for v in ticks.values())
    gaps = sum((max(v) - min(v)) // step + 1 - len(set(v)) for v in ticks.values())
    missed = sum(s.missed for s in q.schedules())
    server.stop()
    late.sort()
    late_all.sort()

    def pct(values, p):
        return values[min(len(values) - 1, int(len(values) * p))] if values else float("nan")
    return {"ticks": sum(len(v) for v in ticks.values()), "duplicates": dupes, "gaps": gaps, "missed": missed,
            "p50": pct(late, 0.5), "p99": pct(late, 0.99), "max": late[-1] if late else float("nan"),
            "p99_all": pct(late_all, 0.99), "max_all": late_all[-1] if late_all else float("nan"), "events": events}


def idle_cost(n: int, seconds: float = 20.0) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-schedules-idle-"))
    server = localserver.start(data_dir=tmp)
    url = f"redis://127.0.0.1:{server.port}/0"
    q = DelayQueue.from_url(url)
    q.configure_topic("daily", partitions=6)
    before = q.redis.info("memory")["used_memory"]
    day0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    t0 = time.monotonic()
    for i in range(n):   # one tick a day each, at a different second of the day
        q.upsert_schedule(f"daily-{i:06d}", topic="daily", every=86400,
                          start=datetime.fromtimestamp(day0 + i * 86400 / n, UTC), payload='{"report":"x"}')
    upsert_s = time.monotonic() - t0
    after = q.redis.info("memory")["used_memory"]
    proc = scheduler(url)
    time.sleep(3)                        # started and settled
    c0, _ = tree_usage(proc.pid)
    r0 = sum(q.redis.info("cpu")[k] for k in ("used_cpu_sys", "used_cpu_user"))
    time.sleep(seconds)
    c1, rss = tree_usage(proc.pid)
    r1 = sum(q.redis.info("cpu")[k] for k in ("used_cpu_sys", "used_cpu_user"))
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    fired = sum(s.runs for s in q.schedules())
    server.stop()
    return {"schedules": n, "bytes_per_schedule": (after - before) / n, "upsert_ms": upsert_s * 1000 / n,
            "scheduler_cpu_pct": (c1 - c0) / seconds * 100, "redis_cpu_pct": (r1 - r0) / seconds * 100,
            "scheduler_rss_mb": rss / 1e6, "fired": fired, "seconds": seconds}


def report(a: dict, burst: dict, b: dict, args) -> str:
    def row(r):
        return (f"| {r['ticks']:,} | {r['duplicates']} | {r['gaps']} | {r['missed']} | {r['p50']:.0f} ms | "
                f"{r['p99']:.0f} ms | {r['max']:.0f} ms | {r['p99_all']:.0f} ms |")
    lines = [f"## Schedules (`python -m bench.schedules`), Python {sys.version.split()[0]}", "",
             f"Machine: {os.cpu_count()} cores shared with other work (load average "
             f"{os.getloadavg()[0]:.1f} at the end). Each run: three `delayq scheduler` processes; "
             f"{'; '.join(a['events'])}. Lateness: the tick's message creation by Redis's clock minus its "
             "tick, outside the restart (the last column includes the ticks due while Redis was down, fired "
             "when it was back).", "",
             "| run | ticks published | duplicates | gaps | missed (counters) | lateness p50 | p99 | max | p99 with the restart |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {args.schedules} schedules every {args.every:g} s, each its own phase, {args.seconds:g} s " + row(a),
             f"| burst: {args.burst} schedules every {args.every:g} s, all in the same millisecond, "
             f"{args.burst_seconds:g} s " + row(burst), "",
             "A burst is fired one tick after another: each tick is one script call (~0.1-0.15 ms of Redis "
             "with its publish), so the last of N ticks due in the same millisecond is about N x 0.15 ms late "
             "plus the schedulers' own work.", "",
             f"**Idle cost** ({b['schedules']:,} schedules, one tick a day each, spread over the day, topic of 6 "
             f"partitions): Redis memory {b['bytes_per_schedule']:.0f} B per schedule; an upsert "
             f"{b['upsert_ms']:.2f} ms; one scheduler over {b['seconds']:.0f} s: {b['scheduler_cpu_pct']:.1f}% of a "
             f"core ({b['scheduler_rss_mb']:.0f} MB RSS), Redis {b['redis_cpu_pct']:.1f}%, {b['fired']} ticks fired "
             "(the ones due in those seconds, and those that fell due while the schedules were being created).", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=20, help="schedules of the exactly-once run, each its own phase")
    parser.add_argument("--every", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=50, help="schedules of the burst run, all due in one millisecond")
    parser.add_argument("--burst-seconds", type=float, default=24.0)
    parser.add_argument("--idle", type=int, default=100_000)
    parser.add_argument("--write", action="store_true", help="rewrite the section in bench/RESULTS.md")
    args = parser.parse_args()
    a = exactly_once(args.schedules, args.every, args.seconds, spread=True)
    print(a, flush=True)
    burst = exactly_once(args.burst, args.every, args.burst_seconds)
    print(burst, flush=True)
    b = idle_cost(args.idle)
    text = report(a, burst, b, args)
    print(text)
    if args.write:
        replace_section("schedules", text)
    return 0 if all(r["duplicates"] == 0 and r["gaps"] == 0 and r["missed"] == 0 for r in (a, burst)) else 1


if __name__ == "__main__":
    sys.exit(main())
