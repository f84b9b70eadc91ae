"""Replication benchmark: python -m bench.replication [--quick] [--write]

A master with one replica on loopback (the same machine: replication costs CPU here, not network
time). Publishes the same messages with wait_replicas=0 and =1 in alternating rounds of one run,
single calls and batches (publish_many), and reports the rate and the per-call latency of each.
Then adds three Sentinels, SIGKILLs the master while a publisher runs through redis+sentinel://,
and reports how long publishing was impossible (kill to first publish accepted by the new master).
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import redis

from bench.engine import machine, redis_cpu, write_section
from queue_core import DelayQueue
from queue_core.contrib import localserver

ROUNDS = 4


def _publish_rounds(master, replica, n: int, batch: int) -> dict[int, tuple[float, list[float], dict]]:
    """{wait_replicas: (msg/s, per-call latencies in ms, CPU µs per message)} over alternating
    rounds; CPU of this publishing process, of the master and of the replica."""
    queues = {w: DelayQueue.from_url(master.url, wait_replicas=w, wait_timeout=5, actor="bench") for w in (0, 1)}
    servers = {"master": master.client(), "replica": replica.client()}
    cpu = {w: {"publisher": 0.0, "master": 0.0, "replica": 0.0} for w in (0, 1)}
    for q in queues.values():
        q.configure_topic(f"bench-{batch}")
    spent = {0: 0.0, 1: 0.0}
    latencies: dict[int, list[float]] = {0: [], 1: []}
    per_round = n // ROUNDS
    payload = b"x" * 200
    for _ in range(ROUNDS):
        for w, q in queues.items():
            before = {name: redis_cpu(c) for name, c in servers.items()}
            proc = time.process_time()
            started = time.perf_counter()
            for _ in range(per_round // batch):
                t = time.perf_counter()
                if batch == 1:
                    q.publish(f"bench-{batch}", payload)
                else:
                    q.publish_many(f"bench-{batch}", [payload] * batch)
                latencies[w].append((time.perf_counter() - t) * 1000)
            spent[w] += time.perf_counter() - started
            cpu[w]["publisher"] += time.process_time() - proc
            for name, c in servers.items():
                cpu[w][name] += redis_cpu(c) - before[name]
    total = per_round // batch * batch * ROUNDS
    return {w: (total / spent[w], latencies[w], {k: v / total * 1e6 for k, v in cpu[w].items()}) for w in (0, 1)}


def _failover_gap(master, tmp: Path) -> tuple[float, int]:
    """(seconds without a master, publish errors meanwhile) for one SIGKILL of the master."""
    sentinels = [localserver.start_sentinel(master.port, data_dir=tmp / f"sentinel{i}") for i in range(3)]
    try:
        probe = [s.client() for s in sentinels]
        deadline = time.monotonic() + 30
        while not all(len(c.execute_command("SENTINEL", "SENTINELS", "mymaster")) == 2 for c in probe):
            if time.monotonic() > deadline:
                raise RuntimeError("the Sentinels did not find each other within 30 s")
            time.sleep(0.1)
        url = "redis+sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in sentinels) + "/mymaster/0"
        q = DelayQueue.from_url(url, actor="bench", socket_timeout=1, socket_connect_timeout=0.5)
        q.publish("failover", b"before")
        master.process.kill()
        killed = time.monotonic()
        errors = 0
        while True:
            try:
                q.publish("failover", b"after")
                return time.monotonic() - killed, errors
            except redis.RedisError:
                errors += 1
                if time.monotonic() - killed > 60:
                    raise RuntimeError("no new master within 60 s") from None
                time.sleep(0.02)
    finally:
        for s in sentinels:
            s.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8,000 messages per mode instead of 40,000")
    parser.add_argument("--write", action="store_true", help="record the results in bench/RESULTS.md")
    args = parser.parse_args()
    n = 8_000 if args.quick else 40_000
    tmp = Path(tempfile.mkdtemp(prefix="delayq-bench-replication-"))
    master = localserver.start(data_dir=tmp / "master", extra_args=["--repl-diskless-sync-delay", "0"])
    replica = localserver.start_replica(master.port, data_dir=tmp / "replica")
    rows = []

    def row(name, value, note=""):
        rows.append((name, value, note))
        print(f"  {name:<48} {value:>14}  {note}", flush=True)
    try:
        print(f"delayq replication benchmark, {machine()}\n", flush=True)
        for batch in (1, 250):
            results = _publish_rounds(master, replica, n, batch)
            what = "publish, one call per message" if batch == 1 else "publish_many, 250 per call"
            for w, (rate, lat, cpu) in results.items():
                p50, p99 = statistics.median(lat), statistics.quantiles(lat, n=100)[98]
                row(f"{what}, wait_replicas={w}", f"{rate:,.0f} msg/s",
                    f"per call p50 {p50:.2f} ms, p99 {p99:.2f} ms; CPU/msg: publisher {cpu['publisher']:.0f} µs, "
                    f"master {cpu['master']:.0f} µs, replica {cpu['replica']:.0f} µs")
            row(f"{what}: cost of wait_replicas=1", f"{1 - results[1][0] / results[0][0]:.0%} slower", "same run")
        gap, errors = _failover_gap(master, tmp)
        row("failover: SIGKILL of the master to a publish accepted by the new one", f"{gap:.1f} s",
            f"3 Sentinels, down-after 1 s; {errors} failed publish attempts meanwhile")
    finally:
        replica.stop()
        master.stop()
    if args.write:
        write_section("replication", "Replication (`python -m bench.replication`)",
                      f"{machine()}; a master and one replica on loopback, {n:,} messages of 200 bytes per mode "
                      f"in {ROUNDS} alternating rounds.", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
