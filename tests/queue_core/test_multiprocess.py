"""Real worker processes: concurrent claimers and a SIGKILL mid-handler."""

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from queue_core import RetryPolicy

from .helpers import assert_counts, poll

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

CLAIMER = textwrap.dedent("""
    import sys
    from queue_core import DelayQueue
    q = DelayQueue.from_url(sys.argv[1])
    out = []
    idle = 0
    while idle < 50:
        ds = q.claim("race", 7)
        idle = 0 if ds else idle + 1
        out += [f"{d.id}:{d.attempt}" for d in ds]
        q.ack_many(ds)
    print("\\n".join(out))
""")


def test_four_processes_never_claim_the_same_delivery_twice(dq, engine_url):
    ids = dq.publish_many("race", [str(i) for i in range(4000)])
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, engine_url], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT) for _ in range(4)]
    outputs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    claimed = Counter(x for out in outputs for x in out)
    assert max(claimed.values()) == 1
    assert {c.split(":")[0] for c in claimed} == set(ids)
    assert sum(1 for out in outputs if out) >= 2  # the race was real: several processes got work
    assert_counts(dq, "race")


def test_sigkilled_worker_message_returns_as_attempt_two(dq, engine_url):
    dq.configure_topic("jobs", visibility_timeout=1, retry=RetryPolicy.fixed(0))
    mid = dq.publish("jobs", "important")
    env = {**os.environ, "TEST_REDIS_URL": engine_url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "queue_core", "worker", "--url", engine_url, "--topic", "jobs",
           "--handler", "tests.queue_core.handlers:hang_first_attempt", "--concurrency", "2"]
    first = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = None
    try:
        poll(lambda: dq.redis.llen("test:started") == 1, timeout=20)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        second = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        poll(lambda: dq.redis.llen("test:handled") == 1, timeout=20)
    finally:
        for p in (first, second):
            if p and p.poll() is None:
                p.terminate()
                p.wait(15)
    started = [s.decode() for s in dq.redis.lrange("test:started", 0, -1)]
    handled = [s.decode() for s in dq.redis.lrange("test:handled", 0, -1)]
    assert [s.split(":")[:2] for s in started] == [[mid, "1"], [mid, "2"]]
    assert handled[0].split(":")[:2] == [mid, "2"]
    assert_counts(dq, "jobs")


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_in_flight_limits_hold_across_two_worker_processes(dq, engine_url):
    """max_in_flight and max_in_flight_per_key are never exceeded by two worker processes of 8
    handlers each: the handlers' intervals (inside their leases) never overlap more."""
    dq.configure_topic("jobs")
    dq.configure_group("jobs", "default", max_in_flight=5, max_in_flight_per_key=2)
    for key in ("k0", "k1", "k2", "k3"):
        dq.publish_many("jobs", [key] * 15, fairness_key=key)
    env = {**os.environ, "TEST_REDIS_URL": engine_url, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "queue_core", "worker", "--url", engine_url, "--topic", "jobs",
           "--handler", "tests.queue_core.handlers:record_interval", "--concurrency", "8"]
    procs = [subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(2)]
    try:
        poll(lambda: dq.redis.llen("test:intervals") == 60, timeout=30)
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)
    rows = [s.decode().split("|") for s in dq.redis.lrange("test:intervals", 0, -1)]
    spans = [(float(s), float(e)) for _, s, e in rows]
    assert _most_at_once(spans) <= 5
    assert _most_at_once(spans) >= 3            # the limit, not a lack of work, held it
    for key in ("k0", "k1", "k2", "k3"):
        assert _most_at_once([(float(s), float(e)) for k, s, e in rows if k == key]) <= 2
    assert_counts(dq, "jobs")
