"""Chaos: worker processes SIGKILLed at random and restarted, Redis itself restarted once (AOF,
appendfsync always), handlers failing at random. At the end every message is acked or dead,
none is lost, the counts agree, and every redelivery after an expired lease is explained by a
killed worker or by the Redis outage."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from queue_core import DelayQueue, MessageState, RetryPolicy, localserver
from queue_core.events import read_events
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
N = 20_000


def start_worker(url: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "queue_core", "worker", "--url", url, "--topic", "chaos",
                             "--handler", "tests.chaos.handlers:flaky", "--concurrency", "4", "--grace", "1"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_killed_workers_and_a_redis_restart_lose_nothing(tmp_path):
    rng = random.Random(20261122)
    data = tmp_path / "redis"
    server = localserver.start(data_dir=data, appendonly=True, appendfsync="always")
    port = server.port
    q = DelayQueue.from_url(server.url, actor="chaos-test")
    q.configure_topic("chaos", visibility_timeout=1, retry=RetryPolicy.fixed(0.05, max_attempts=4),
                      events_maxlen=2_000_000)
    ids = set(q.publish_many("chaos", [str(i) for i in range(N)], delay=0))
    workers = [start_worker(server.url) for _ in range(4)]
    killed_pids: set[int] = set()
    outage = None
    try:
        for second in range(15):
            time.sleep(1)   # the chaos schedule itself: one kill per second
            victim = rng.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait(10)
            killed_pids.add(workers[victim].pid)
            workers[victim] = start_worker(server.url)
            if second == 7:
                down = time.time() * 1000
                server.stop()
                server = localserver.start(port=port, data_dir=data, appendonly=True, appendfsync="always")
                outage = (down, time.time() * 1000)
        q = DelayQueue.from_url(server.url, actor="chaos-test")

        def settled():
            c = q.counts("chaos")
            return c[MessageState.pending] + c[MessageState.ready] + c[MessageState.unacked] + \
                c[MessageState.retrying] == 0
        wait_for(settled, 180, "every message acked or dead")
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
                w.wait(30)
    try:
        events = read_events(q, "chaos")
        acked = {e["msg"] for e in events if e["event"] == "acked"}
        dead = set(m.id for m in q.peek("chaos", "dead", limit=1000))
        counts = q.counts("chaos")
        assert acked | dead == ids, f"lost: {len(ids - acked - dead)}"
        assert not acked & dead
        assert len(acked) == q.stats("chaos")["acked"] and counts[MessageState.dead] == len(dead)
        assert sum(counts.values()) == len(dead)
        # Every expired lease: the claim before it was by a killed worker, or it fell in the outage.
        last_claim: dict[str, dict] = {}
        unexplained, by_kill, by_outage = [], 0, 0
        for e in events:
            if e["event"] == "claimed":
                last_claim[e["msg"]] = e
            elif e["event"] == "expired":
                claim = last_claim[e["msg"]]
                pid = int(claim["actor"].split(":")[1])
                if pid in killed_pids:
                    by_kill += 1
                elif outage and outage[0] - 2000 <= int(claim["ts"]) <= outage[1] + 2000:
                    by_outage += 1
                else:
                    unexplained.append((e["msg"], claim["actor"], claim["ts"]))
        print(f"\nchaos: {N} messages, {len(acked)} acked, {len(dead)} dead, {len(killed_pids)} workers killed, "
              f"redeliveries after expired leases: {by_kill} from killed workers, {by_outage} from the Redis "
              f"outage, {len(unexplained)} unexplained")
        assert unexplained == []
        assert by_kill > 0  # the kills hit work in flight: the test exercised what it claims to
    finally:
        server.stop()
