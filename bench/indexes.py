"""Indexed fields (issue 36 point 3): an equality query over 1,000,000 messages in one state, the
publish cost of keeping an index, and the Redis memory an index takes per message.

    python -m bench.indexes [--messages 1000000] [--queries 200] [--write]

One Redis (redis-server, else valkey), three topics holding the same messages (payload
{"customer": {"id": i % 10,000}, "n": i}, published 250 a call): ``plain`` declares no index,
``indexed`` indexes payload.customer.id (10,000 values, each hashed once and then cached),
``unique`` indexes payload.n (a value per message, as an order id: every one hashed). Publish:
the median call's wall time, the client's CPU and the Redis CPU (INFO cpu) a message for each,
the three topics taking turns every 10 calls (which one goes first rotates): the machine's speed drifts by more than
an index costs (between runs here, the plain publish took 5.8 to 10.2 µs a message). Memory:
used_memory's growth over each topic's calls, per message and per index entry.
One at a time: ``publish()`` of one message to three more topics (the same declarations), the
topic rotating each call, the median of each one's call times and its mean client CPU: what a web
request that publishes one message pays for the index.
Removal: both drained (claim + ack_many) in alternating slices, Redis CPU per message.
Query: ``--queries`` random ``payload.customer.id:<k>`` searches of the ready state (a page of
50; each id has 100 messages), p50/p95/max; and one of them as a scan of the plain topic, for
comparison.
"""

import argparse
import os
import random
import statistics
import sys
import time

from bench.engine import redis_cpu, replace_section
from queue_core import DelayQueue
from queue_core.contrib import localserver

BATCH = 250
ROUNDS = 9   # slices of the drain, the two topics taking turns
RUN = 10     # publish calls a topic makes in a row (fill)


def customers(n: int) -> int:
    """Distinct customer ids: each has 100 messages (10,000 ids at the default million)."""
    return max(1, n // 100)


def small(i: int, n: int) -> dict:
    """The payload of message i of n in the main run: 31-38 bytes of JSON."""
    return {"customer": {"id": i % customers(n)}, "n": i}


def order(i: int, n: int) -> dict:
    """An order as a shop might publish it: ~290 bytes of JSON, its id a text no other has."""
    return {"order_id": f"ORD-2026-{i:08d}", "customer": {"id": i % customers(n), "email": f"c{i % 997}@example.com",
                                                           "tier": "gold"},
            "items": [{"sku": f"SKU-{i % 97}", "qty": 2, "price": 19.99}, {"sku": "SKU-7", "qty": 1, "price": 5.5}],
            "total": 45.48, "currency": "EUR", "created_at": "2026-12-06T10:00:00Z", "note": "leave it at the door"}


def fill(q: DelayQueue, topics: tuple[str, ...], n: int, payload=small) -> dict[str, dict]:
    """Publish messages 0..n-1 to each of ``topics``, a call of BATCH at a time, the topics taking
    turns every RUN calls (which goes first rotates): the machine's speed drifts by more than an
    index costs, and calls side by side see the same machine. Per topic: each call's wall and
    client CPU seconds ("calls", "cpu_calls"), and the Redis CPU seconds and used_memory bytes its
    calls added (INFO before and after each run of RUN calls: an INFO between two calls, whose
    reply the client parses, would leave each timed call colder than a publishing loop leaves it)."""
    out: dict[str, dict] = {t: {"calls": [], "cpu_calls": [], "cpu": 0.0, "mem": 0} for t in topics}
    starts = list(range(0, n, BATCH))
    for r, first in enumerate(range(0, len(starts), RUN)):
        for topic in topics[r % len(topics):] + topics[:r % len(topics)]:
            before = q.redis.info("cpu", "memory")
            for start in starts[first:first + RUN]:
                payloads = [payload(i, n) for i in range(start, min(n, start + BATCH))]
                c0, t0 = time.thread_time(), time.perf_counter()
                q.publish_many(topic, payloads)
                out[topic]["calls"].append(time.perf_counter() - t0)
                out[topic]["cpu_calls"].append(time.thread_time() - c0)
            after = q.redis.info("cpu", "memory")
            out[topic]["cpu"] += sum(after[k] - before[k] for k in ("used_cpu_user", "used_cpu_sys"))
            out[topic]["mem"] += after["used_memory"] - before["used_memory"]
    return out


def drain(q: DelayQueue, topic: str, n: int, into: dict) -> None:
    """Claim and ack ``n`` messages of ``topic`` (1,000 a claim, acked in one ack_many), adding
    Redis CPU seconds to ``into``: the removal's share of an index (counting what leaves, sweeping
    the log) shows here."""
    before_cpu, left = redis_cpu(q.redis), n
    while left > 0:
        batch = q.claim(topic, min(1000, left))
        if not batch:
            break
        q.ack_many(batch)
        left -= len(batch)
    into["cpu"] = into.get("cpu", 0.0) + redis_cpu(q.redis) - before_cpu


def one_at_a_time(q: DelayQueue, calls: int) -> dict[str, dict[str, float]]:
    """publish() of one message to ``one-plain``, ``one-indexed`` and ``one-unique`` (declared as
    the bulk topics are), the topic rotating each call: median wall µs a call and mean client CPU
    µs a call per topic."""
    topics = ("one-plain", "one-indexed", "one-unique")
    for t in topics:
        q.configure_topic(t)
    q.set_indexes("one-indexed", ["payload.customer.id"])
    q.set_indexes("one-unique", ["payload.n"])
    wall: dict[str, list[float]] = {t: [] for t in topics}
    cpu: dict[str, list[float]] = {t: [] for t in topics}
    for i in range(calls):
        for t in topics[i % 3:] + topics[:i % 3]:
            payload = {"customer": {"id": i % 100}, "n": 3 * i + len(t)}
            c0, w0 = time.thread_time(), time.perf_counter()
            q.publish(t, payload)
            wall[t].append(time.perf_counter() - w0)
            cpu[t].append(time.thread_time() - c0)
    return {t.removeprefix("one-"): {"wall_us": statistics.median(wall[t]) * 1e6, "cpu_us": statistics.fmean(cpu[t]) * 1e6}
            for t in topics}


def log_bytes(q: DelayQueue, topic: str) -> int:
    """The bytes of the topic's index log (its one partition)."""
    from queue_core.keys import index_log_keys

    return sum(q.redis.strlen(k) for k in index_log_keys(q.keys(topic, 0).p))


def per_message(total: dict, n: int) -> dict:
    """A topic's figures a message: the median call's wall time, client and Redis CPU and memory over all."""
    wall = statistics.median(total["calls"]) / BATCH
    return {"wall_us": wall * 1e6, "client_us": sum(total["cpu_calls"]) / n * 1e6, "redis_us": total["cpu"] / n * 1e6,
            "bytes": total["mem"] / n, "rate": 1 / wall}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--single", type=int, default=6000, help="publish() calls per topic, one message each")
    parser.add_argument("--write", action="store_true", help="rewrite the section in bench/RESULTS.md")
    args = parser.parse_args()
    server = localserver.start()
    try:
        q = DelayQueue.from_url(f"redis://127.0.0.1:{server.port}/0")
        q.configure_topic("plain")
        q.configure_topic("indexed")
        q.set_indexes("indexed", ["payload.customer.id"])
        q.configure_topic("unique")
        q.set_indexes("unique", ["payload.n"])
        topics = ("plain", "indexed", "unique")
        totals = fill(q, topics, args.messages)
        step = -(-args.messages // ROUNDS // BATCH) * BATCH
        plain, indexed, unique = (per_message(totals[t], args.messages) for t in topics)
        print("plain", plain, "indexed", indexed, "unique", unique, flush=True)
        single = one_at_a_time(q, args.single)
        print("one at a time", single, flush=True)
        orders_n = min(args.messages, 200_000)
        for t in ("order-plain", "order-id"):
            q.configure_topic(t)
        q.set_indexes("order-id", ["payload.order_id"])
        orders = {t.removeprefix("order-"): per_message(v, orders_n)
                  for t, v in fill(q, ("order-plain", "order-id"), orders_n, order).items()}
        print("orders", orders, flush=True)
        rng = random.Random(7)
        times = []
        for _ in range(args.queries):
            k = rng.randrange(customers(args.messages))
            t0 = time.perf_counter()
            page = q.search("indexed", "ready", f"payload.customer.id:{k}", limit=50)
            times.append((time.perf_counter() - t0) * 1000)
            assert len(page.messages) == 50 and page.total == 100, (k, len(page.messages), page.total)
        times.sort()
        t0 = time.perf_counter()
        scan = q.search("plain", "ready", "payload.customer.id:4242", limit=50)
        scan_ms = (time.perf_counter() - t0) * 1000
        result = {"p50": statistics.median(times), "p95": times[int(len(times) * 0.95)], "max": times[-1],
                  "scan_ms": scan_ms, "scan_scanned": scan.scanned, "scan_found": len(scan.messages)}
        print(result, flush=True)
        # Removal: drain both topics in alternating slices (claim + ack_many), Redis CPU a message.
        drained: dict[str, dict] = {"plain": {}, "indexed": {}}
        log_full = log_bytes(q, "indexed")
        for r in range(ROUNDS):
            for topic in (("plain", "indexed") if r % 2 == 0 else ("indexed", "plain")):
                drain(q, topic, step, drained[topic])
        ack_plain, ack_indexed = (drained[t]["cpu"] / args.messages * 1e6 for t in ("plain", "indexed"))
        log_left = log_bytes(q, "indexed")
        print({"ack_plain_us": ack_plain, "ack_indexed_us": ack_indexed, "log_full": log_full, "log_left": log_left},
              flush=True)
        version = q.redis.info("server").get("redis_version", "?")
    finally:
        server.stop()
    text = "\n".join([
        f"## Indexed fields (`python -m bench.indexes`), Python {sys.version.split()[0]}, Redis {version}", "",
        f"Machine: {os.cpu_count()} cores shared with other work (load average {os.getloadavg()[0]:.1f} at the end). "
        f"{args.messages:,} messages per topic, payload {{\"customer\": {{\"id\": i % {customers(args.messages):,}}}, "
        f"\"n\": i}}, "
        f"published {BATCH} a call, the topics taking turns every {RUN} calls (wall: the median call; client CPU: "
        f"the publishing thread's); `indexed` declares "
        f"payload.customer.id, `unique` payload.n, `plain` nothing.", "",
        "| topic | publish msg/s | wall µs/msg | client CPU µs/msg | Redis CPU µs/msg | Redis memory B/msg |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {name} | {v['rate']:,.0f} | {v['wall_us']:.2f} | {v['client_us']:.2f} | {v['redis_us']:.2f} | "
          f"{v['bytes']:.0f} |" for name, v in (("plain", plain), ("indexed", indexed), ("unique", unique))), "",
        f"The index costs {indexed['bytes'] - plain['bytes']:.0f} B per message (one entry), "
        f"{(indexed['redis_us'] / plain['redis_us'] - 1) * 100:+.0f} % Redis CPU and "
        f"{(indexed['wall_us'] / plain['wall_us'] - 1) * 100:+.0f} % wall time per published message. "
        f"`unique` indexes payload.n instead, a value no other message has (an order id: no hash is "
        f"cached): {(unique['redis_us'] / plain['redis_us'] - 1) * 100:+.0f} % Redis CPU, "
        f"{(unique['wall_us'] / plain['wall_us'] - 1) * 100:+.0f} % wall.", "",
        f"A larger payload, an order of ~290 bytes of JSON ({orders_n:,} messages a topic, {BATCH} a call, taking turns "
        f"every {RUN} calls), `order-id` indexing payload.order_id (a text no other order has): wall "
        f"{orders['plain']['wall_us']:.1f} µs a message plain, {orders['id']['wall_us']:.1f} indexed "
        f"({(orders['id']['wall_us'] / orders['plain']['wall_us'] - 1) * 100:+.0f} %); client CPU "
        f"{orders['plain']['client_us']:.2f} and {orders['id']['client_us']:.2f} µs a message; Redis CPU "
        f"{(orders['id']['redis_us'] / orders['plain']['redis_us'] - 1) * 100:+.0f} %.", "",
        f"One at a time (`publish()` of one message, {args.single:,} calls a topic, the topic rotating each call; "
        f"median wall a call, mean client CPU a call):", "",
        "| topic | wall µs a call | client CPU µs a call |",
        "|---|---:|---:|",
        *(f"| {t} | {v['wall_us']:.1f} ({(v['wall_us'] / single['plain']['wall_us'] - 1) * 100:+.1f} %) | "
          f"{v['cpu_us']:.1f} ({v['cpu_us'] - single['plain']['cpu_us']:+.1f}) |" for t, v in single.items()), "",
        f"Query `payload.customer.id:<k>` on the ready state ({args.messages:,} messages; 100 match each), a page "
        f"of 50, {args.queries} random ids: p50 {result['p50']:.1f} ms, p95 {result['p95']:.1f} ms, max "
        f"{result['max']:.1f} ms. The same query as a scan of the plain topic's first page: {scan_ms:,.0f} ms, "
        f"{result['scan_scanned']:,} members scanned, {result['scan_found']} found (a page stops at its ~2 s budget).",
        "",
        f"Removal: both topics drained by claim + ack_many of 1,000, in {ROUNDS} alternating slices: Redis CPU "
        f"{ack_plain:.2f} µs an acked message plain, {ack_indexed:.2f} µs indexed "
        f"({(ack_indexed / ack_plain - 1) * 100:+.0f} %: counting what leaves and sweeping the log). The log held "
        f"{log_full / 1e6:.1f} MB when full and {log_left / 1e6:.2f} MB once drained (a sweep runs once as many "
        f"messages have gone as are left; `q.sweep_index` finishes one).",
        ""])
    print(text)
    if args.write:
        replace_section("indexes", text)
    p95_ok = result["p95"] < 100
    cost_ok = indexed["redis_us"] <= plain["redis_us"] * 1.10
    return 0 if p95_ok and cost_ok else 1


if __name__ == "__main__":
    sys.exit(main())
