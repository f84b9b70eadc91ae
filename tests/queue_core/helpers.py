import os
import random
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from queue_core import DelayQueue, MessageState, RetryPolicy
from queue_core.events import read_events
from queue_core.keys import HASHTABLE_FIELD


def counts(q: DelayQueue, topic: str) -> dict[str, int]:
    return {s.value: n for s, n in q.counts(topic).items()}


def assert_counts(q: DelayQueue, topic: str, **expected: int) -> None:
    """Assert every state's count; states not named must be empty."""
    want = {s.value: expected.get(s.value, 0) for s in MessageState}
    assert counts(q, topic) == want


def server_ms(q: DelayQueue) -> int:
    sec, usec = q.redis.time()
    return sec * 1000 + usec // 1000


def events(q: DelayQueue, topic: str, group: str | None = "default") -> list[dict[str, str]]:
    """The topic's events of one group (and the publishes), one row per message (the stream
    batches them per script call); ``group=None`` for every group's."""
    rows = read_events(q, topic, group=group)
    for row in rows:
        if isinstance(row.get("payload"), bytes):
            row["payload"] = row["payload"].decode("utf-8", "replace")
    return rows


DATA_KEYS = ("msgs", "refs", "dedup", "tracebacks", "info", "att", "leases")


def entries(q: DelayQueue, key: str) -> int:
    """Fields of a hash, not counting the marker that keeps hot hashes in hashtable encoding."""
    return q.redis.hlen(key) - int(q.redis.hexists(key, HASHTABLE_FIELD))


def data_keys_empty(q: DelayQueue, topic: str) -> bool:
    """No message data left behind in any partition or group: records, references,
    dedup keys, tracebacks, delivery records, attempts and leases all gone."""
    if "shadow" in q.groups(topic):
        q.delete_group(topic, "shadow")   # the shape's idle second group: the last holder goes
    layout = q.layout(topic, fresh=True)
    for p in range(layout.partitions):
        for group in layout.groups:
            k = q.keys(topic, p, group)
            if any(entries(q, getattr(k, name)) for name in DATA_KEYS):
                return False
    return True


def index_entries(q: DelayQueue, topic: str) -> int:
    """The entries in the topic's index logs (those of messages gone too, until a sweep)."""
    from queue_core.keys import INDEX_HASH_CHARS, INDEX_LANES, index_log_keys

    return sum(q.redis.strlen(k) for p in range(q.layout(topic).partitions)
               for k in index_log_keys(q.keys(topic, p).p)[:INDEX_LANES]) // INDEX_HASH_CHARS


def poll(fn, timeout: float = 5.0, interval: float = 0.005):
    """Call fn until it returns something truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def kill(dq, topic, n, error="boom"):
    """Publish ``n`` messages to ``topic`` and fail each once with a one-attempt policy: ``n`` dead
    letters (``error`` a text, or a function of the delivery for per-message errors)."""
    dq.configure_topic(topic, retry=RetryPolicy.fixed(0, max_attempts=1))
    ids = dq.publish_many(topic, [f"m{i}" for i in range(n)])
    for d in dq.claim(topic, n):
        dq.nack(d, error if isinstance(error, str) else error(d))
    return ids


HOUR = 3_600_000


def rewind(dq, name: str, to_ms: int) -> None:
    """Leave the schedule as a scheduler outage leaves it: its stored next tick at ``to_ms``."""
    s = dq.schedule(name)
    pk = dq.keys(s.topic, s.partition).p
    dq.redis.hset(pk.schedule_runs, f"{name}|next", to_ms)
    dq.redis.zadd(pk.schedule_due, {name: to_ms})


def this_hour(dq) -> int:
    return dq.server_ms() // HOUR * HOUR


def drain(dq, topic: str) -> list:
    out = []
    while batch := dq.claim(topic, 100):
        out += batch
        dq.ack_many(batch)
    return out


@contextmanager
def running(worker):
    """A blocking Worker running in a thread for the block; stopped (and joined) after it."""
    t = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    t.start()
    try:
        yield worker
    finally:
        worker.stop()
        t.join(15)
        assert not t.is_alive(), "worker did not stop"


class WorkerProcesses:
    """``n`` worker processes (``python -m queue_core worker``) of ``topic`` running ``handler``
    for a ``with`` block, for the chaos tests: ``kill_one()`` SIGKILLs one at random and starts
    another in its place; the rest are stopped at the end."""

    def __init__(self, url: str, topic: str, handler: str, *, n: int = 2, concurrency: int = 4, seed: int = 7):
        root = Path(__file__).resolve().parents[2]
        self._cmd = [sys.executable, "-m", "queue_core", "worker", "--url", url, "--topic", topic,
                     "--handler", handler, "--concurrency", str(concurrency)]
        self._env, self._root = {**os.environ, "TEST_REDIS_URL": url, "PYTHONPATH": str(root)}, root
        self._n, self._rng, self.kills, self.procs = n, random.Random(seed), 0, []

    def _start(self):
        return subprocess.Popen(self._cmd, env=self._env, cwd=self._root, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def kill_one(self) -> None:
        victim = self._rng.randrange(len(self.procs))
        self.procs[victim].send_signal(signal.SIGKILL)
        self.procs[victim].wait(10)
        self.kills += 1
        self.procs[victim] = self._start()

    def __enter__(self) -> "WorkerProcesses":
        self.procs = [self._start() for _ in range(self._n)]
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                p.wait(15)
