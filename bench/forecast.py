"""Due-load forecast benchmark: python -m bench.forecast [--kind redis|valkey] [--members N] [--partitions P]

Publishes N pending messages (default 10,000,000, in batches of 1,000, each batch due at a random
time in the next week), then reads ``due_forecast`` in each of the shapes the Forecast page offers
(an hour of minutes, a day of minutes, a week of hours, a week of minutes) and an hour of seconds:
the wall time of the whole call as a client sees it (p50 and p95 of --reads reads), Redis's time
in the script calls (INFO commandstats), and the longest single script call (SLOWLOG with a 0.5 ms
threshold: Redis 7 logs the commands a script runs too, so a threshold of 0 would log, and pay
for, every ZCOUNT): how long another client can wait.

Prints its figures; bench/RESULTS.md records them by hand ("Due-load forecast").
"""

import argparse
import os
import random
import statistics
import tempfile
import time

import redis

from queue_core import DelayQueue
from queue_core.contrib import localserver

SHAPES = (("hour of minutes", 3600, 60), ("day of minutes", 86_400, 60), ("week of hours", 7 * 86_400, 3600),
          ("week of minutes", 7 * 86_400, 60), ("hour of seconds", 3600, 1))
WEEK = 7 * 86_400


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", default="auto", help="redis, valkey or auto (redis-server when on PATH)")
    parser.add_argument("--members", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--reads", type=int, default=21)
    args = parser.parse_args()
    server = localserver.start(kind=args.kind, data_dir=tempfile.mkdtemp(prefix="delayq-bench-forecast-"))
    try:
        r = redis.Redis.from_url(server.url)
        q = DelayQueue.from_url(server.url, actor="bench")
        print(f"server: {server.kind} {r.info('server')['redis_version']}; load average {os.getloadavg()[0]:.2f}")
        q.configure_topic("due", partitions=args.partitions)
        rng, batch, started = random.Random(7), [{"n": i} for i in range(1000)], time.perf_counter()
        for _ in range(args.members // 1000):
            q.publish_many("due", batch, delay=rng.uniform(60, WEEK))
        print(f"published {q.counts('due')['pending']:,} pending in {time.perf_counter() - started:.0f} s; "
              f"used_memory {r.info('memory')['used_memory'] / 2**30:.2f} GiB")
        r.config_set("slowlog-log-slower-than", 500)
        r.config_set("slowlog-max-len", 10_000)
        for label, horizon, bucket in SHAPES:
            walls = []
            r.slowlog_reset()
            r.config_resetstat()
            for _ in range(args.reads):
                began = time.perf_counter()
                f = q.due_forecast("due", horizon=horizon, bucket=bucket, align=True)
                walls.append((time.perf_counter() - began) * 1000)
            longest = max((e["duration"] for e in r.slowlog_get(10_000) if e["command"][:7].lower() == b"evalsha"), default=0)
            stat = r.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
            walls.sort()
            print(f"{label} ({len(f.counts):,} buckets, {sum(f.counts):,} due in them): wall p50 "
                  f"{statistics.median(walls):.1f} ms, p95 {walls[int(len(walls) * .95)]:.1f} ms; "
                  f"{stat['calls'] / args.reads:.0f} script calls a read, Redis {stat['usec'] / args.reads / 1000:.1f} ms a read, "
                  f"longest call {longest / 1000:.2f} ms")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
