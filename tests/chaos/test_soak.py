"""Soak: steady load for DELAYQ_SOAK_SECONDS (default 300: five minutes) - publishing, two worker
processes consuming, 10 % of handler calls failing, dead letters replayed every 30 s. After the
drain, Redis's memory is back at its baseline, no key outside the documented layout exists, every
per-message structure is empty, and the workers' RSS stayed flat."""

import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.procstat import tree_usage
from queue_core import DelayQueue, MessageState, RetryPolicy, localserver
from queue_core.keys import HASHTABLE_FIELD
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SECONDS = float(os.environ.get("DELAYQ_SOAK_SECONDS", "300"))
RATE = 200                       # messages per second
MAX_MEMORY_GROWTH = 1 << 20      # bytes: the events stream (capped at 1,000 here) and counters
MAX_RSS_GROWTH = 8 << 20         # bytes per worker, last minute vs first minute
PER_MESSAGE = ("pending", "ready", "unacked", "retrying", "dead", "msgs", "refs", "info", "att", "tracebacks",
               "dedup", "leases", "fp_count", "fp_info", "fp_index", "expiry", "active", "waiting")


def held(q, key: str) -> int:
    """Members of a ZSET or fields of a hash, not counting the hashtable marker (keys.py)."""
    if q.redis.type(key) == b"zset":
        return q.redis.zcard(key)
    return q.redis.hlen(key) - int(q.redis.hexists(key, HASHTABLE_FIELD))


def start_worker(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "queue_core", "worker", "--url", url, "--topic", "soak",
                             "--handler", "tests.chaos.handlers:flaky10", "--concurrency", "4"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def drain(q: DelayQueue, timeout: float) -> int:
    """Replay dead letters until every message is acked; returns the replays it took."""
    replays = 0
    deadline = time.monotonic() + timeout

    def settled():
        c = q.counts("soak")
        return sum(c.values()) == c[MessageState.dead]
    while True:
        wait_for(settled, max(1.0, deadline - time.monotonic()), "soak topic settled")
        if q.counts("soak")[MessageState.dead] == 0:
            return replays
        replays += q.replay_dead("soak")


def used_memory(q: DelayQueue) -> int:
    return int(q.redis.info("memory")["used_memory"])


def test_steady_load_leaves_nothing_behind(tmp_path):
    server = localserver.start(data_dir=tmp_path)
    q = DelayQueue.from_url(server.url, actor="soak")
    q.configure_topic("soak", retry=RetryPolicy.fixed(0.05, max_attempts=3), events_maxlen=1_000)
    workers = [start_worker(server.url) for _ in range(2)]
    try:
        # Warm-up: scripts loaded, counters and the capped stream exist; then the baseline.
        q.publish_many("soak", [b"warm-up"] * 500)
        drain(q, 60)
        baseline = used_memory(q)
        samples: dict[int, list[tuple[float, int]]] = {w.pid: [] for w in workers}
        stop = threading.Event()
        published = replayed = 0
        rng = random.Random(5)
        started = time.monotonic()
        next_replay = started + 30
        tick = 0
        while time.monotonic() - started < SECONDS:
            tick += 1
            # 20 messages every 100 ms, each due within 2 s.
            q.publish_many("soak", [os.urandom(64) for _ in range(RATE // 10)], delay=rng.random() * 2)
            published += RATE // 10
            if time.monotonic() >= next_replay:
                replayed += q.replay_dead("soak")
                next_replay += 30
            if tick % 50 == 0:
                for w in workers:
                    assert w.poll() is None, "a worker died during the soak"
                    samples[w.pid].append((time.monotonic() - started, tree_usage(w.pid)[1]))
            stop.wait(max(0.0, started + tick * 0.1 - time.monotonic()))
        replayed += drain(q, 120)
        stats = q.stats("soak")
        after = used_memory(q)
        leftovers = {name: held(q, getattr(q.keys("soak"), name)) for name in PER_MESSAGE}
        undocumented = q.undocumented_keys()
        all_keys = sorted(k.decode() for k in q.redis.scan_iter(count=1000))
    finally:
        for w in workers:
            w.terminate()
            w.wait(30)
        server.stop()
    print(f"\nsoak {SECONDS:.0f} s: {published} published, {stats['acked']} acked, {replayed} replayed; "
          f"memory {baseline / 1024:.0f} KiB -> {after / 1024:.0f} KiB")
    assert stats["acked"] == published + 500
    assert replayed > 0
    assert not undocumented, f"keys outside the documented layout: {undocumented}"
    assert not [k for k in all_keys if not k.startswith("dq:")], all_keys
    assert not any(leftovers.values()), f"per-message structures left: {leftovers}"
    assert after - baseline < MAX_MEMORY_GROWTH, f"memory grew by {(after - baseline) / 1024:.0f} KiB"
    window = min(60.0, SECONDS / 3)
    for pid, points in samples.items():
        first = max(v for t, v in points if t <= window)
        last = max(v for t, v in points if t >= SECONDS - window)
        print(f"worker {pid}: RSS {first / 2**20:.1f} MiB in the first {window:.0f} s, "
              f"{last / 2**20:.1f} MiB in the last")
        assert last - first < MAX_RSS_GROWTH, f"worker {pid} RSS grew {(last - first) / 2**20:.1f} MiB"
