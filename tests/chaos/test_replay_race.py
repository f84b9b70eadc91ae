"""Bulk replay of 100,000 dead letters while a worker consumes them and a second operator replays
the same group at the same time: no message is replayed twice and each operation's record adds up."""

import threading

import pytest

from dashboard.models import BulkOperation
from dashboard.tasks import run_bulk_operation
from queue_core import DelayQueue, Failure, MessageState, RetryPolicy, Worker
from queue_core.events import read_events
from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]
N = 100_000


def make_dead_letters(q: DelayQueue, topic: str, n: int) -> None:
    q.configure_topic(topic, retry=RetryPolicy.fixed(0, max_attempts=1), dead_max_count=n, events_maxlen=1_000_000)
    for _ in range(n // 1000):
        q.publish_many(topic, [b"x"] * 1000)
        # real nack script calls, one per claimed batch, to build the DLQ quickly
        q.nack_many([Failure(d, TimeoutError("upstream timed out")) for d in q.claim(topic, 1000)])


def test_two_operators_replaying_one_group_never_replay_twice(redis_url, settings):
    settings.DELAYQ_REDIS_URL = redis_url
    q = DelayQueue.from_url(redis_url)
    make_dead_letters(q, "orders", N)
    [group] = q.error_groups("orders")
    cutoff = q.server_ms()
    ops = [BulkOperation.objects.create(topic="orders", total=group.count, rate_limit=1_000_000, batch_size=100,
                                          scope={"fingerprint": group.fingerprint, "since_ms": 0, "cutoff_ms": cutoff})
           for _ in range(2)]
    consumed = []
    worker = Worker(q, {"orders": lambda m: consumed.append(m.id)}, concurrency=4)
    threads = [threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})]
    threads += [threading.Thread(target=run_bulk_operation, args=(op.pk,)) for op in ops]
    for t in threads:
        t.start()
    try:
        for t in threads[1:]:
            t.join(300)
        wait_for(lambda: sum(q.counts("orders").values()) == 0, 120, "replayed letters consumed")
    finally:
        worker.stop()
        threads[0].join(30)
    for op in ops:
        op.refresh_from_db()
        assert op.status == "done"
        assert op.moved + op.skipped + op.failed == op.total == N  # each record adds up
    assert ops[0].moved > 0 and ops[1].moved > 0, "both operators really raced"
    assert ops[0].moved + ops[1].moved == N                        # together: every letter once
    assert q.stats("orders")["replayed"] == N                      # Redis's own count agrees
    replayed = [e["msg"] for e in read_events(q, "orders") if e["event"] == "replayed"]
    assert len(replayed) == len(set(replayed)) == N                # no message replayed twice
    assert len(consumed) == len(set(consumed)) == N                # each delivered once after replay
    assert q.counts("orders")[MessageState.dead] == 0
