"""Search benchmark: python -m bench.search [--kind redis|valkey] [--members N] [--share S ...]

1. One page of search (2 s budget) over N ready messages for a query that decodes every payload
   and one rejected by the raw-text check, at each ``--share`` (a floor that the search exceeds
   while Redis has time to spare, unless ``--fixed``): members scanned, and the script
   calls' durations from SLOWLOG (threshold 0).
2. Workers beside operators: a claim-200/ack loop drains 60,000 messages alone and while two other
   processes scan a 500,000-message pending state page after page, alternating three times;
   medians of the drain rates, for each ``--share``.

Prints its figures; bench/RESULTS.md records them by hand ("Search beside workers").
"""

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time

import redis

from queue_core import DelayQueue
from queue_core.contrib import localserver

QUERY_DECODES = "payload.customer.id:4242"     # a number: every payload is decoded
QUERY_REJECTS = 'payload.note:"late fee"'      # the raw text rules out almost every member
BATCH = [{"customer": {"id": i}, "note": "late fee" if i % 1000 == 0 else "ok" + "x" * 60} for i in range(1000)]


def _scanner(url: str, share: float, adaptive: bool, stop, out) -> None:
    q = DelayQueue.from_url(url, actor="bench-scan")
    after, pages, scanned, last = None, 0, 0, 0
    while not stop.is_set():
        page = q.search("big", "pending", QUERY_DECODES, after=after, limit=50, redis_share=share, adaptive=adaptive)
        pages += 1
        scanned += page.scanned - (last if after else 0)
        last, after = page.scanned, page.next_cursor
    out.put(scanned / max(pages, 1))


def _drain(q: DelayQueue, n: int) -> float:
    started, done = time.perf_counter(), 0
    while done < n:
        deliveries = q.claim("work", 200)
        if deliveries:
            q.ack_many(deliveries)
            done += len(deliveries)
    return n / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", default="auto", help="redis, valkey or auto (redis-server when on PATH)")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--share", type=float, action="append", help="redis_share values (default 1.0 and 0.05)")
    parser.add_argument("--fixed", action="store_true", help="hold each search to its share (adaptive=False)")
    args = parser.parse_args()
    shares = args.share or [1.0, 0.05]
    adaptive = not args.fixed
    server = localserver.start(kind=args.kind, data_dir=tempfile.mkdtemp(prefix="delayq-bench-search-"))
    try:
        r = redis.Redis.from_url(server.url)
        q = DelayQueue.from_url(server.url, actor="bench")
        print(f"server: {server.kind} {r.info('server')['redis_version']}")
        for _ in range(args.members // 1000):
            q.publish_many("orders", BATCH)
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", 100_000)
        for query in (QUERY_DECODES, QUERY_REJECTS):
            for share in shares:
                r.slowlog_reset()
                started = time.perf_counter()
                page = q.search("orders", "ready", query, limit=1000, redis_share=share, adaptive=adaptive)
                wall = time.perf_counter() - started
                calls = sorted(e["duration"] for e in r.slowlog_get(100_000) if e["command"][:7].lower() == b"evalsha")
                print(f"{query!r} share {share}: one page scanned {page.scanned:,} of {page.total:,} in {wall:.2f} s; "
                      f"{len(calls)} calls, median {calls[len(calls) // 2]} us, p99 {calls[int(len(calls) * .99)]} us, "
                      f"max {calls[-1]} us")
        for _ in range(500):
            q.publish_many("big", BATCH, delay=3600)
        for share in shares:
            rates: dict[str, list[float]] = {"alone": [], "beside two scans": []}
            per_page = []
            for _ in range(3):
                for mode in rates:
                    for _ in range(60):
                        q.publish_many("work", BATCH)
                    stop, out, procs = mp.Event(), mp.Queue(), []
                    if mode != "alone":
                        procs = [mp.Process(target=_scanner, args=(server.url, share, adaptive, stop, out)) for _ in range(2)]
                        for p in procs:
                            p.start()
                        time.sleep(1)
                    rates[mode].append(_drain(q, 60_000))
                    stop.set()
                    per_page += [out.get() for _ in procs]
                    for p in procs:
                        p.join()
            alone, beside = statistics.median(rates["alone"]), statistics.median(rates["beside two scans"])
            print(f"share {share}: drain alone {alone:,.0f} msg/s, beside two scans {beside:,.0f} msg/s "
                  f"({beside / alone - 1:+.0%}); each scan {statistics.median(per_page):,.0f} members per page; runs "
                  f"{[round(x) for x in rates['alone']]} / {[round(x) for x in rates['beside two scans']]}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
