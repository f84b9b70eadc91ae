"""Batches on a 3-master Redis Cluster: every member of a batch lives in the batch's partition,
so the scripts that end members count them and fire the callbacks there (no script spans
partitions); batches of one topic spread over the masters, and callbacks reach a topic on
another node through the forwarder (engine/batch.py)."""

import threading

import pytest

from queue_core import RetryPolicy, Worker
from queue_core.keys import partition_of

pytestmark = pytest.mark.slow


def test_batches_live_in_one_partition_each_and_fire_once_across_the_masters(cq, redis_cluster):
    cq.configure_topic("campaign", partitions=6, retry=RetryPolicy.fixed(0, max_attempts=1))
    owners = {cq.redis.get_node_from_key(cq.keys("campaign", p).ready).port for p in range(6)}
    assert owners == {s.port for s in redis_cluster}
    batches = {}
    for p in range(6):
        with cq.batch("campaign", on_complete=("reports", f"done {p}"), on_success=("reports", f"ok {p}"),
                      on_dead=("alerts", f"dead {p}"), partition=p) as b:
            ids = b.publish_many([f"{p}-{i}" for i in range(50)]) + [b.publish(f"{p}-poison")]
        assert {partition_of(i) for i in ids} == {p} == {b.partition}
        batches[b.id] = ids[-1]
    poison = set(batches.values())

    def handler(message):
        if message.id in poison:
            raise ValueError("poison")
    w = Worker(cq, {"campaign": handler}, concurrency=4)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        from tests.conftest import wait_for

        wait_for(lambda: sum(cq.counts("campaign").values()) == len(poison), 30, "campaign drained")
    finally:
        w.stop()
        runner.join(15)
    for bid in batches:
        s = cq.batch_status("campaign", bid).of("default")
        assert (s.total, s.acked, s.dead, s.pending) == (51, 50, 1, 0) and s.unsent == ()
    assert cq.redis.get_node_from_key(cq.keys("reports").ready).port in owners
    got = sorted((d.message.headers["delayq-batch"], d.message.headers["delayq-batch-event"])
                 for d in cq.claim("reports", 100) + cq.claim("alerts", 100))
    assert got == sorted((b, e) for b in batches for e in ("complete", "dead"))   # one dead each: no success
    assert cq.forward_batch_callbacks("campaign") == 0     # every partition's outbox, one pipeline over the nodes
