"""Cluster benchmark: python -m bench.cluster [--quick] [--write]

Starts a 3-master Redis Cluster on loopback and a topic with 6 partitions, and reports where the
partitions live; how evenly random dedup keys spread messages over them (max/min, from keyed
single publishes); then, for a bulk publish and a drain by one worker process, each shard's Redis
CPU per message it handled and the throughput this projects for N shards (one shard's CPU per
message sets what one shard can handle when it is the bottleneck).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.engine import machine, redis_cpu, write_section
from bench.procstat import tree_usage
from queue_core import DelayQueue
from queue_core.contrib import localserver

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="15,000 messages instead of 60,000")
    parser.add_argument("--write", action="store_true", help="record the results in bench/RESULTS.md")
    args = parser.parse_args()
    n = 15_000 if args.quick else 60_000
    tmp = tempfile.mkdtemp(prefix="delayq-bench-cluster-")
    servers = localserver.start_cluster(tmp, masters=3)
    rows = []

    def row(name, value, note=""):
        rows.append((name, value, note))
        print(f"  {name:<52} {value:>16}  {note}", flush=True)
    try:
        url = f"redis+cluster://127.0.0.1:{servers[0].port}"
        q = DelayQueue.from_url(url, actor="bench")
        q.configure_topic("spread", partitions=PARTITIONS)
        q.configure_topic("keyed", partitions=PARTITIONS)
        node_of = {p: q.redis.get_node_from_key(q.keys("spread", p).ready).port for p in range(PARTITIONS)}
        by_node = {s.port: sorted(p for p, port in node_of.items() if port == s.port) for s in servers}
        print(f"delayq cluster benchmark, {machine()}\n", flush=True)
        row("partitions per master", ", ".join(f"{len(ps)} ({ps})" for ps in by_node.values()),
            f"{PARTITIONS} partitions of one topic over 3 masters")
        clients = {s.port: s.client() for s in servers}
        keyed = n // 3
        t = time.perf_counter()
        for _ in range(keyed):   # one message per call: each routed by its own random key
            q.publish("keyed", b"x" * 100, key=uuid.uuid4().hex)
        publish_rate = keyed / (time.perf_counter() - t)
        by_key = [q.redis.zcard(q.keys("keyed", p).ready) for p in range(PARTITIONS)]
        row("messages per partition (random keys)", " / ".join(f"{c:,}" for c in by_key),
            f"max/min {max(by_key) / min(by_key):.3f} (target <= 1.1)")
        row("publish with a key, one call per message", f"{publish_rate:,.0f} msg/s", "single client")
        cpu0 = {port: redis_cpu(c) for port, c in clients.items()}
        t = time.perf_counter()
        for _ in range(n // 1000):
            q.publish_many("spread", [b"x" * 100] * 1000)
        row("bulk publish (publish_many, spread over partitions)", f"{n / (time.perf_counter() - t):,.0f} msg/s",
            "script calls one after another (no EVALSHA pipelines on a cluster)")
        per_partition = [q.redis.zcard(q.keys("spread", p).ready) for p in range(PARTITIONS)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        worker = subprocess.Popen([sys.executable, "-m", "queue_core", "worker", "--url", url, "--topic", "spread",
                                   "--handler", "bench.handlers:noop", "--concurrency", "8", "--prefetch", "400",
                                   "--batch", "200"], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            t = time.perf_counter()
            while q.stats("spread").get("acked", 0) < n:
                if time.monotonic() > deadline:
                    raise TimeoutError("drain did not finish in 300 s")
                time.sleep(0.05)
            drain_rate = n / (time.perf_counter() - t)
            worker_cpu = tree_usage(worker.pid)[0]
        finally:
            worker.terminate()
            worker.wait(30)
        row("drain, 1 worker process (a fetcher per partition)", f"{drain_rate:,.0f} msg/s",
            f"worker CPU {worker_cpu / n * 1e6:.1f} us/msg including start-up")
        worst = 0.0
        for s in servers:
            handled = sum(per_partition[p] for p in by_node[s.port])
            cpu_us = (redis_cpu(clients[s.port]) - cpu0[s.port]) / max(handled, 1) * 1e6
            worst = max(worst, cpu_us)
            row(f"master :{s.port}: Redis CPU per message it holds", f"{cpu_us:.1f} us",
                f"{handled:,} messages: bulk publish + claim + ack")
        one = 1e6 / worst
        row("projected capacity, CPU-bound shards", ", ".join(f"{k} shards ~{k * one:,.0f} msg/s" for k in (1, 3, 6)),
            "1 / (Redis CPU per message) per shard, partitions >= shards, keys spread evenly")
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write:
        write_section("cluster", "Cluster (`python -m bench.cluster`)",
                      f"Run on {machine()}; 3 masters on one machine (they share its 2 cores), "
                      f"{n:,} messages of 100 B.", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
