"""A worker thread's own connection (queue_core/own_connection.py): the fetcher's claims and
the settler's acks go out on a connection each keeps, with redis-py's replies, errors and retry
policy, and give it back at the end."""

import contextlib
import threading

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from queue_core import DelayQueue, Worker
from queue_core.own_connection import OwnConnection
from queue_core.steps import run

from .helpers import assert_counts, poll, running


def client_id(own) -> int:
    """The server's id of the connection ``own`` keeps."""
    own._conn.send_command("CLIENT", "ID")
    return int(own._conn.read_response())


@contextlib.contextmanager
def counting_takes(dq, n: int):
    """Publishes "0".."n-1" to topic t, then yields {thread name: connections taken from dq's
    pool} while inside. The scripts are loaded before (SCRIPT LOAD takes a pooled connection):
    every take counted is a call's."""
    dq.publish("t", "first")
    dq.ack_many(dq.claim("t", 1))
    dq.publish_many("t", [str(i) for i in range(n)])
    pool = dq.redis.connection_pool
    took: dict[str, int] = {}
    real_get = pool.get_connection

    def counting_get(*a, **k):
        name = threading.current_thread().name
        took[name] = took.get(name, 0) + 1
        return real_get(*a, **k)
    pool.get_connection = counting_get
    try:
        yield took
    finally:
        del pool.get_connection


def claim(dq, own, count=10):
    """One claim from partition 0 through ``own`` (the worker's fetcher does just this)."""
    return run(dq._claim_batch("t", count, partition=0), own)


@pytest.mark.single_partition
def test_a_claim_and_an_ack_through_the_own_connection_keep_one_connection(dq):
    got = []
    with counting_takes(dq, 30) as took:
        own = OwnConnection.of(dq.redis)
        try:
            for _ in range(3):
                result = claim(dq, own)
                got += result.deliveries
                assert run(dq._ack_many(result.deliveries), own) == []
        finally:
            own.close()
    assert sorted(int(d.message.text()) for d in got) == list(range(30))
    assert took == {threading.current_thread().name: 1}   # six script calls, one connection taken
    assert_counts(dq, "t")
    assert not dq.redis.connection_pool._in_use_connections   # close() gave it back


@pytest.mark.single_partition
def test_a_flushed_script_cache_is_loaded_again(dq):
    """A restarted or newly promoted server lacks the scripts: NOSCRIPT, then load and call again."""
    dq.publish_many("t", ["a", "b"])
    own = OwnConnection.of(dq.redis)
    try:
        dq.redis.script_flush()
        assert [d.message.text() for d in claim(dq, own).deliveries] == ["a", "b"]
    finally:
        own.close()


@pytest.mark.single_partition
def test_finding_a_killed_own_connection_raises_and_the_next_call_takes_a_fresh_one(dq):
    """With redis-py's default policy (no retry) the call fails as a client call would; the claim
    never ran, so nothing is claimed twice or lost, and the thread's next call works."""
    dq.publish_many("t", ["a", "b"])
    own = OwnConnection.of(dq.redis)
    try:
        assert claim(dq, own, 0).deliveries == []   # connects
        dq.redis.client_kill_filter(_id=client_id(own))
        with pytest.raises(redis.ConnectionError):
            claim(dq, own)
        assert own._conn is None   # given back; the next call takes another
        assert [d.message.text() for d in claim(dq, own).deliveries] == ["a", "b"]
    finally:
        own.close()
    assert not dq.redis.connection_pool._in_use_connections


def test_the_connections_retry_policy_holds(engine_url):
    """A client built with retries: a killed own connection is reconnected within the same call."""
    q = DelayQueue.from_url(engine_url, retry=Retry(NoBackoff(), 2))
    try:
        q.publish_many("t", ["a", "b"])
        own = OwnConnection.of(q.redis)
        try:
            assert claim(q, own, 0).deliveries == []
            q.redis.client_kill_filter(_id=client_id(own))
            assert [d.message.text() for d in claim(q, own).deliveries] == ["a", "b"]
        finally:
            own.close()
    finally:
        q.redis.close()


def test_only_a_blocking_client_on_one_server_gets_one(dq, engine_url):
    assert OwnConnection.of(dq.redis) is not None
    single = redis.Redis.from_url(engine_url, single_connection_client=True)
    try:
        assert OwnConnection.of(single) is None   # it has its one connection already
    finally:
        single.close()
    assert OwnConnection.of(redis.asyncio.Redis.from_url(engine_url)) is None


@pytest.mark.single_partition
def test_a_worker_drains_on_its_threads_own_connections_and_gives_them_back(dq):
    """The settler makes many ack calls on one connection; at stop every connection is back.
    (Acks of several partitions at once go in one pipeline, from the pool as before.)"""
    n = 5000   # the settler acks at most ~1,000 a call: several calls
    seen = []
    acks = []
    real_ack = dq._ack_many

    def counting_ack(ds, **k):
        acks.append(len(ds))
        return (yield from real_ack(ds, **k))
    with counting_takes(dq, n) as took:
        dq._ack_many = counting_ack
        with running(Worker(dq, {"t": lambda m: seen.append(m.text())}, concurrency=2)):
            poll(lambda: len(seen) == n and sum(dq.counts("t").values()) == 0, timeout=30)
    assert sorted(seen, key=int) == [str(i) for i in range(n)]
    assert len(acks) >= 5
    # One connection for all its acks (none more unless a connection broke).
    assert took.get("dq-settler", 0) == 1, took
    assert not dq.redis.connection_pool._in_use_connections


@pytest.mark.single_partition
def test_the_own_connection_is_the_calling_threads_alone(dq):
    """Inside DelayQueue._own_connection() this thread's claims and acks use one kept connection;
    another thread's calls meanwhile go through the pool; nested, the outer one stays."""
    with counting_takes(dq, 20) as took:
        with dq._own_connection():
            with dq._own_connection():
                dq.ack_many(dq.claim("t", 5))
            dq.ack_many(dq.claim("t", 5))
            other = threading.Thread(target=lambda: dq.ack_many(dq.claim("t", 5)), name="other")
            other.start()
            other.join()
            dq.ack_many(dq.claim("t", 5))
        dq.claim("t", 1)
    me = threading.current_thread().name
    assert took == {me: 2, "other": 2}   # 6 calls on one kept connection, then one pooled call; other: 2
    assert_counts(dq, "t", unacked=0)
    assert not dq.redis.connection_pool._in_use_connections

