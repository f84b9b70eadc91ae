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


def test_the_own_connection_sends_every_kind_of_argument_as_the_client_does(dq):
    """It packs with hiredis directly (skipping redis-py's pass over the arguments): text, bytes,
    numbers, and a bytearray or memoryview (which that pass turns into bytes, and hiredis refuses
    alone) reach the script as the client's own call sends them."""
    sha = dq.redis.script_load("return ARGV")
    args = ["é😀", b"\x00\xff", 12, -5, 1.5, 0.1, 1e20, bytearray(b"ba"), memoryview(b"mv"), ""]
    own = OwnConnection.of(dq.redis)
    try:
        assert own.evalsha(sha, 0, *args) == dq.redis.evalsha(sha, 0, *args)
        assert own.evalsha(sha, 0, *args)[7:9] == [b"ba", b"mv"]
    finally:
        own.close()


def test_an_asyncio_client_delayq_makes_packs_script_calls_as_redis_py_does(engine_url):
    """connect(asyncio=True) gives its pool's connections hiredis's packing for EVALSHA (redis.asyncio
    packs in Python, an ack's ids at ~2 us each): every kind of argument reaches the script as a
    plain redis.asyncio client sends it, other commands and a user's own client are left as they
    are, and what hiredis refuses is refused in redis-py's words."""
    from queue_core.connect import connect
    from queue_core.own_connection import HiredisScriptCalls
    from tests.conftest import run_async

    args = ["é😀", b"\x00\xff", 12, -5, 1.5, 0.1, 1e20, bytearray(b"ba"), memoryview(b"mv"), ""]

    async def both():
        ours, plain = connect(engine_url, asyncio=True), redis.asyncio.Redis.from_url(engine_url)
        try:
            sha = await plain.script_load("return ARGV")
            got = await ours.evalsha(sha, 0, *args), await plain.evalsha(sha, 0, *args)
            await ours.set("own-k", "v")
            refused = []
            for client in (ours, plain):
                with pytest.raises(redis.DataError) as info:
                    await client.evalsha(sha, 0, True)
                refused.append(str(info.value))
            kinds = [type(c) for c in (await ours.connection_pool.get_connection(), )]
            return got, await plain.get("own-k"), refused, kinds, plain.connection_pool.connection_class
        finally:
            await ours.aclose()
            await plain.aclose()

    (mine, theirs), value, refused, kinds, plain_class = run_async(both())
    assert mine == theirs and mine[7:9] == [b"ba", b"mv"]
    assert value == b"v" and refused[0] == refused[1]
    assert issubclass(kinds[0], HiredisScriptCalls) and not issubclass(plain_class, HiredisScriptCalls)


def test_finding_a_connection_class_of_the_users_own_still_packs_the_script_calls(engine_url):
    """A connection class that overrides pack_command (tracing, auditing) sees every script call,
    blocking and asyncio: delayq's hiredis packing is for redis-py's own classes only."""
    import redis.asyncio.connection

    from queue_core.connect import connect
    from tests.conftest import run_async

    seen = []

    class Traced(redis.Connection):
        def pack_command(self, *args):
            seen.append(args[0])
            return super().pack_command(*args)

    class ATraced(redis.asyncio.connection.Connection):
        def pack_command(self, *args):
            seen.append(args[0])
            return super().pack_command(*args)

    client = redis.Redis.from_url(engine_url, connection_class=Traced)
    sha = client.script_load("return ARGV")
    own = OwnConnection.of(client)
    try:
        assert own.evalsha(sha, 0, "a", 1) == [b"a", b"1"]
    finally:
        own.close()
        client.close()
    assert seen.count("EVALSHA") == 1

    async def traced():
        c = connect(engine_url, asyncio=True, connection_class=ATraced)
        try:
            return await c.evalsha(sha, 0, "b"), c.connection_pool.connection_class
        finally:
            await c.aclose()
    got, cls = run_async(traced())
    assert got == [b"b"] and cls is ATraced and seen.count("EVALSHA") == 2


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
def test_finding_a_connection_the_server_closed_between_calls_is_replaced_before_the_next(dq):
    """The server closed the kept connection while it sat idle (its timeout, a restart, a
    failover's CLIENT KILL): the next call reconnects first, as the pool does for a connection it
    hands out, instead of failing (a failed ack sent its messages round again)."""
    dq.publish_many("t", ["a", "b"])
    own = OwnConnection.of(dq.redis)
    try:
        assert claim(dq, own, 0).deliveries == []   # connects
        killed = client_id(own)
        dq.redis.client_kill_filter(_id=killed)
        assert [d.message.text() for d in claim(dq, own).deliveries] == ["a", "b"]
        assert client_id(own) != killed
    finally:
        own.close()
    assert not dq.redis.connection_pool._in_use_connections


def failing_once(conn):
    """``conn``'s next send fails as a dropped socket's does (then sends go through again)."""
    send = conn.send_packed_command

    def fail(*a, **k):
        del conn.send_packed_command
        raise redis.ConnectionError("injected: connection dropped mid-call")
    conn.send_packed_command = fail
    return send


@pytest.mark.single_partition
def test_the_connections_retry_policy_holds(dq, engine_url):
    """A call that fails on the wire: with redis-py's default (no retry) it raises as a client
    call does and the thread's next call takes a fresh connection; a client built with retries
    sends it again within the same call."""
    dq.publish_many("t", ["a", "b", "c"])
    own = OwnConnection.of(dq.redis)
    try:
        assert claim(dq, own, 0).deliveries == []   # connects
        failing_once(own._conn)
        with pytest.raises(redis.ConnectionError):
            claim(dq, own, 1)
        assert own._conn is None   # given back; the next call takes another
        assert [d.message.text() for d in claim(dq, own, 1).deliveries] == ["a"]
    finally:
        own.close()
    q = DelayQueue.from_url(engine_url, retry=Retry(NoBackoff(), 2))
    own = OwnConnection.of(q.redis)
    try:
        assert claim(q, own, 0).deliveries == []
        failing_once(own._conn)
        assert [d.message.text() for d in claim(q, own, 1).deliveries] == ["b"]
    finally:
        own.close()
        q.redis.close()


@pytest.mark.single_partition
def test_finding_a_worker_whose_connections_were_killed_acks_the_next_messages_at_once(dq):
    """Every connection of a running worker killed between two bursts (a failover's CLIENT KILL):
    the second burst is claimed, handled once and acked without waiting for leases to run out."""
    seen = []   # a failed ack would show as a wait for the lease (30 s)
    with running(Worker(dq, {"t": lambda m: seen.append(m.text())}, concurrency=2)):
        dq.publish_many("t", [f"a{i}" for i in range(10)])
        poll(lambda: dq.stats("t").get("acked", 0) == 10, timeout=10)
        dq.redis.client_kill_filter(_type="normal", skipme=True)
        dq.publish_many("t", [f"b{i}" for i in range(10)])
        poll(lambda: dq.stats("t").get("acked", 0) == 20, timeout=10)
    assert sorted(seen) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])


def test_finding_a_blocking_or_small_pool_keeps_no_connection(engine_url):
    """A kept connection would starve a pool sized on purpose (or the thread itself, when a
    NOSCRIPT reload needs a second one): such clients keep the client's way."""
    blocking = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(engine_url, max_connections=50))
    small = redis.Redis.from_url(engine_url, max_connections=4)
    default = redis.Redis.from_url(engine_url)
    try:
        assert OwnConnection.of(blocking) is None
        assert OwnConnection.of(small) is None
        assert OwnConnection.of(default) is not None
    finally:
        for client in (blocking, small, default):
            client.close()


def test_finding_instrumented_commands_keep_the_client_path(engine_url, monkeypatch):
    """OpenTelemetry, Sentry and the like wrap Redis.execute_command; a subclass may override it
    or evalsha: the claims and acks must stay where those see them."""
    import functools

    class Custom(redis.Redis):
        def evalsha(self, *args):
            return super().evalsha(*args)
    custom = Custom.from_url(engine_url)
    assert OwnConnection.of(custom) is None
    custom.close()
    plain = redis.Redis.execute_command
    monkeypatch.setattr(redis.Redis, "execute_command", functools.wraps(plain)(lambda *a, **k: plain(*a, **k)))
    traced = redis.Redis.from_url(engine_url)
    assert OwnConnection.of(traced) is None
    traced.close()


@pytest.mark.single_partition
def test_finding_a_renewed_token_is_sent_before_the_next_call(dq):
    """Token re-authentication (a StreamingCredentialProvider) sets a new token on the connections
    in use; the kept one sends it before its next call, as a released one would."""
    dq.redis.acl_setuser("dq-renewed", enabled=True, passwords=["+renewed-secret"], keys=["*"], channels=["*"],
                         commands=["+@all"])
    own = OwnConnection.of(dq.redis)
    try:
        assert claim(dq, own, 0).deliveries == []

        class Token:   # what redis-py's set_re_auth_token stores: try_get("oid") and get_value()
            def try_get(self, _name):
                return "dq-renewed"

            def get_value(self):
                return "renewed-secret"
        own._conn.set_re_auth_token(Token())
        assert claim(dq, own, 0).deliveries == []
        own._conn.send_command("ACL", "WHOAMI")
        assert own._conn.read_response() == b"dq-renewed"
    finally:
        own.close()
        dq.redis.connection_pool.disconnect()   # no connection stays logged in as the test user
        dq.redis.acl_deluser("dq-renewed")


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

