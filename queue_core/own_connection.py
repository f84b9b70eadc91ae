"""``OwnConnection``: the blocking client as one thread uses it inside
``DelayQueue._own_connection()`` (a worker's fetcher and settler), sending its script calls (claim,
ack, nack) on a connection the thread keeps.

Why: redis-py 8 spends ~40 us of CPU around every command beyond its connection's own send and
read (a PING: 52-64 us through the client, 15-17 on a kept connection), ~20 us of it taking and
giving back a pooled connection, the rest its observability and retry wrappers; a claim or an ack
of a worker's size (100-200 messages) pays ~120 us more. A default drain makes a claim and an ack
per ~100 messages: 1.5-2 us of worker CPU a message (bench/RESULTS.md, "A worker thread's own
connection"). Kept here, the call is redis-py's own connection, packing, reply parsing, errors
and retry policy; only the per-call pool round and wrappers are skipped.

Everything else an operation asks of the client (commands, pipelines) goes through the client as
before: ``getattr`` passes it on.
"""

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class OwnConnection:
    """``client`` for one thread's steps (queue_core.steps.run), with EVALSHA on a kept connection.
    Not thread-safe: one per thread, ``close()`` when the thread's routine ends."""

    def __init__(self, client):
        self._client = client
        self._pool = client.connection_pool
        self._conn = None

    @classmethod
    def of(cls, client) -> "OwnConnection | None":
        """One for a blocking client on one server (Sentinel's included); None for a cluster client
        (it picks a node per key), an asyncio one, or one that keeps a single connection already."""
        if not isinstance(client, redis.Redis) or client.connection is not None:
            return None
        return cls(client)

    def __getattr__(self, name):
        return getattr(self._client, name)

    def evalsha(self, sha, numkeys, *keys_and_args):
        """redis-py's ``evalsha`` on this thread's connection: the same packing, reply and errors
        (NoScriptError makes the Script load and call again), the connection's retry policy."""
        conn = self._conn
        if conn is None:
            conn = self._conn = self._pool.get_connection()
        packed = conn.pack_command("EVALSHA", sha, numkeys, *keys_and_args)

        def attempt():
            conn.send_packed_command(packed)
            return conn.read_response()

        try:
            reply = conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())
        except (RedisConnectionError, RedisTimeoutError):
            self.close()   # the next call takes a connection from the pool again
            raise
        if conn.should_reconnect():   # the server announced maintenance (redis-py's notifications)
            conn.disconnect()
        return reply

    def close(self) -> None:
        """Give the kept connection back to the pool."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn)

