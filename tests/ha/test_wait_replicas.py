"""Replica-acknowledged writes (wait_replicas): a real master and replica; the replica is frozen
with SIGSTOP to make the acknowledgement fail."""

import os
import signal
import time
from contextlib import contextmanager

import pytest

from queue_core import DelayQueue, InvalidArgument, MessageState, NotReplicated


@contextmanager
def frozen(server):
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.fixture
def durable(replicated):
    q = DelayQueue.from_url(replicated.master.url + "?wait_replicas=1&wait_timeout=0.5", actor="test")
    q.configure_topic("orders")
    yield q
    q.redis.close()


def test_a_publish_returns_once_the_replica_has_it(replicated, durable):
    msg_id = durable.publish("orders", {"n": 1}, key="k1")
    replica = DelayQueue(replicated.replicas[0].client())
    # WAIT returned 1, so the replica holds the message already: read it there, not on the master.
    assert replica.get("orders", msg_id).payload == b'{"n":1}'
    assert durable.wait_replicas == 1 and durable.wait_timeout == 0.5


def test_a_frozen_replica_makes_publish_fail_within_its_timeout(replicated, durable):
    with frozen(replicated.replicas[0]):
        started = time.monotonic()
        with pytest.raises(NotReplicated) as info:
            durable.publish("orders", {"n": 2}, key="k2")
        took = time.monotonic() - started
        assert 0.45 <= took < 2.0, took
        assert info.value.acked == 0 and info.value.wanted == 1 and len(info.value.ids) == 1
        assert "0 of 1 replica(s)" in str(info.value) and "same key is safe" in str(info.value)
        # The message exists on the master, as the error says.
        msg_id = info.value.ids[0]
        assert durable.get("orders", msg_id).state is MessageState.ready
    # Publishing again with the same key once the replica is back: the same message, confirmed.
    assert durable.publish("orders", {"n": 2}, key="k2") == msg_id
    assert durable.counts("orders")[MessageState.ready] == 1


def test_publish_many_reports_the_ids_it_could_not_confirm(replicated, durable):
    with frozen(replicated.replicas[0]), pytest.raises(NotReplicated) as info:
        durable.publish_many("orders", [b"a", b"b", b"c"])
    assert len(info.value.ids) == 3
    assert {durable.get("orders", i).payload for i in info.value.ids} == {b"a", b"b", b"c"}


def test_replays_wait_for_the_replica_too(replicated, durable):
    plain = DelayQueue.from_url(replicated.master.url, actor="test")
    ids = plain.publish_many("orders", [b"x", b"y", b"z"])
    for _ in ids:
        delivery = plain.claim("orders")[0]
        plain.reject(delivery, "boom")
    assert plain.counts("orders")[MessageState.dead] == 3
    with frozen(replicated.replicas[0]):
        with pytest.raises(NotReplicated) as one:
            durable.replay("orders", [ids[0]])
        assert one.value.ids == (ids[0],)
        with pytest.raises(NotReplicated):
            durable.replay_dead("orders")
    # Both replays happened on the master (only the acknowledgement was missing).
    assert plain.counts("orders")[MessageState.ready] == 3
    plain.redis.close()


def test_replay_edited_waits_for_the_replica(replicated, durable):
    import hashlib

    msg_id = durable.publish("orders", b"old")
    durable.reject(durable.claim("orders")[0], "bad payload")
    with frozen(replicated.replicas[0]), pytest.raises(NotReplicated) as info:
        durable.replay_edited("orders", msg_id, b"new", hashlib.sha1(b"old").hexdigest())
    assert durable.get("orders", info.value.ids[0]).payload == b"new"


def test_writes_that_create_nothing_do_not_wait(replicated, durable):
    """Acks, nacks and claims are not slowed by a missing replica (only creations wait)."""
    durable.publish("orders", b"m")
    with frozen(replicated.replicas[0]):
        started = time.monotonic()
        delivery = durable.claim("orders")[0]
        durable.ack(delivery)
        assert time.monotonic() - started < 0.4


def test_options_are_checked(replicated):
    with pytest.raises(InvalidArgument, match="wait_replicas must be a whole number"):
        DelayQueue.from_url(replicated.master.url + "?wait_replicas=-1")
    with pytest.raises(InvalidArgument, match="wait_timeout must be between"):
        DelayQueue.from_url(replicated.master.url, wait_replicas=1, wait_timeout=0)
    q = DelayQueue.from_url(replicated.master.url + "?wait_replicas=2", wait_replicas=1)
    assert q.wait_replicas == 1      # the keyword wins over the URL


def test_a_master_without_the_scripts_cached_still_waits(replicated, durable):
    """A promoted replica may not have the scripts: the acknowledged path reloads them."""
    durable.redis.script_flush()
    msg_id = durable.publish("orders", b"after flush")
    assert DelayQueue(replicated.replicas[0].client()).get("orders", msg_id).payload == b"after flush"
