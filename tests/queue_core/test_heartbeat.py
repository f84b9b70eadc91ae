"""Worker heartbeats with details, and ``live_workers``: what the dashboard's Workers page reads.
The running Worker and AsyncWorker report through them in test_worker.py and test_aio.py."""

import json

from queue_core.keys import WORKER_DETAILS_TTL_MS, worker_details_key

from .helpers import server_ms

DETAILS = {"host": "box-1", "pid": 4242, "runtime": "threads", "concurrency": 8, "in_flight": 3,
           "started_ms": 1_700_000_000_000, "version": "0.1.0"}


def test_heartbeat_details_are_read_back_with_the_groups_that_have_no_worker(dq):
    dq.configure_group("orders", "billing")
    dq.configure_topic("emails")
    dq.heartbeat(["orders", "emails"], "w-1", details=DETAILS)
    report = dq.live_workers([("orders", "default"), ("orders", "billing"), ("emails", "default")])
    [worker] = report.workers
    assert (worker.id, worker.group, worker.topics) == ("w-1", "default", ("orders", "emails"))
    assert (worker.host, worker.pid, worker.runtime, worker.concurrency, worker.in_flight, worker.started_ms,
            worker.version) == ("box-1", 4242, "threads", 8, 3, 1_700_000_000_000, "0.1.0")
    assert report.now_ms - 5_000 <= worker.last_beat_ms <= report.now_ms
    assert report.unattended == [("orders", "billing")]


def test_details_expire_by_themselves_and_go_at_sign_off(dq):
    dq.heartbeat(["orders"], "w-1", details=DETAILS)
    key = worker_details_key("default", "w-1", dq.prefix)
    assert 0 < dq.redis.pttl(key) <= WORKER_DETAILS_TTL_MS
    dq.heartbeat(["orders"], "w-1", remove=True)
    assert not dq.redis.exists(key)
    assert dq.live_workers([("orders", "default")]).workers == []


def test_details_key_is_in_the_documented_layout(dq):
    dq.publish("orders", "x")
    dq.heartbeat(["orders"], "w-1", details=DETAILS)
    assert worker_details_key("default", "w-1", dq.prefix) in dq.documented_keys()
    assert dq.undocumented_keys() == []


def test_a_bare_heartbeat_is_listed_without_details(dq):
    """A worker of an older delayq (or a caller of heartbeat without details) still shows."""
    dq.heartbeat(["orders"], "old-worker")
    [worker] = dq.live_workers([("orders", "default")]).workers
    assert (worker.id, worker.topics, worker.host, worker.pid, worker.version) == (
        "old-worker", ("orders",), None, None, None)


def test_a_stale_heartbeat_is_not_live(dq):
    stale = server_ms(dq) - 31_000
    dq.redis.zadd(dq.keys("orders").workers, {"gone": stale})
    report = dq.live_workers([("orders", "default")])
    assert report.workers == [] and report.unattended == [("orders", "default")]


def test_unreadable_details_do_not_hide_the_worker(dq):
    dq.heartbeat(["orders"], "w-1")
    dq.redis.set(worker_details_key("default", "w-1", dq.prefix), "{not json")
    dq.heartbeat(["orders"], "w-2", details={**DETAILS, "pid": "not a number", "topics": "nope"})
    workers = dq.live_workers([("orders", "default")]).workers
    assert [(w.id, w.host, w.pid, w.topics) for w in workers] == [("w-1", None, None, ("orders",)),
                                                                  ("w-2", "box-1", None, ("orders",))]
    assert json.loads(dq.redis.get(worker_details_key("default", "w-2", dq.prefix)))["topics"] == ["orders"]


def test_a_heartbeat_trims_hour_old_ones_only_when_asked(dq):
    """Heartbeats over an hour old are dropped by a beat with trim (a worker's once a minute), kept
    by one without (its other beats: an idle worker's commands)."""
    dq.configure_topic("orders")
    k = dq.keys("orders", 0, "default")
    dq.redis.zadd(k.workers, {"gone": server_ms(dq) - 3_700_000})
    dq.heartbeat(["orders"], "w-1", trim=False)
    assert set(dq.redis.zrange(k.workers, 0, -1)) == {b"gone", b"w-1"}
    dq.heartbeat(["orders"], "w-1")
    assert dq.redis.zrange(k.workers, 0, -1) == [b"w-1"]
