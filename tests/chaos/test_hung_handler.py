"""A handler that hangs: its lease is extended up to max_lease, then another worker process gets
the message; when the hung one finally returns, its late ack is refused and changes nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import RetryPolicy
from queue_core.events import read_events
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_hung_handler_is_redelivered_after_max_lease_and_its_late_ack_refused(dq_url_pair):
    q, url = dq_url_pair
    q.configure_topic("jobs", visibility_timeout=1, retry=RetryPolicy.fixed(0))
    mid = q.publish("jobs", "x")
    env = {**os.environ, "TEST_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "queue_core", "worker", "--url", url, "--topic", "jobs", "--handler",
           "tests.chaos.handlers:hang_first_attempt", "--max-lease", "3", "--grace", "10"]
    # Room for exactly one message: while its handler hangs, this worker can claim nothing else,
    # so the redelivery must go to the other process.
    first = subprocess.Popen(cmd + ["--concurrency", "1", "--prefetch", "0"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = None
    try:
        wait_for(lambda: q.redis.llen("chaos:started") == 1, 20, "first attempt started")
        second = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        wait_for(lambda: q.redis.llen("chaos:finished") == 1, 30, "second attempt done elsewhere")
        q.redis.rpush("chaos:release", "go")  # the hung handler returns now and its worker acks late
        wait_for(lambda: q.redis.llen("chaos:finished") == 2, 20, "hung handler returned")
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.terminate()
                p.wait(30)
    started = [s.decode().split(":") for s in q.redis.lrange("chaos:started", 0, -1)]
    assert [a for a, _ in started] == ["1", "2"] and started[0][1] != started[1][1]  # two processes
    events = read_events(q, "jobs")
    claims = [int(e["ts"]) for e in events if e["event"] == "claimed"]
    # Redelivered only after the lease was extended to max_lease (3 s), not after one 1 s lease.
    assert claims[1] - claims[0] >= 3000, f"redelivered {claims[1] - claims[0]} ms after the first claim"
    assert [e["event"] for e in events if e["msg"] == mid].count("acked") == 1
    assert q.stats("jobs")["acked"] == 1 and sum(q.counts("jobs").values()) == 0
    assert "refused: lease lost" in first.stderr.read()


@pytest.fixture
def dq_url_pair(redis_url):
    from queue_core import DelayQueue

    q = DelayQueue.from_url(redis_url)
    yield q, redis_url
    q.redis.close()
