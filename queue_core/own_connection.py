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

Script calls are packed by hiredis alone (``packed_script_call``): here, and on the connections of
the redis.asyncio clients delayq makes (``pack_scripts_with_hiredis``), whose own packing is Python.
"""

import contextlib

import redis
import redis.asyncio.connection
import redis.connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

MIN_POOL = 32   # a pool allowing fewer connections was sized on purpose: no connection is kept from it
_EXECUTE, _EVALSHA = redis.Redis.execute_command, redis.Redis.evalsha   # as redis-py defines them
# redis-py's packer with hiredis is hiredis.pack_command after a Python pass over the arguments
# that turns bytearrays and memoryviews into bytes (~0.2 us an argument: an ack sends one an id);
# redis.asyncio packs in Python always (~2 us an argument of an ack's, copying its buffer so far
# for each).
try:
    from hiredis import pack_command as _hiredis_pack
    from redis.connection import HiredisRespSerializer as _HIREDIS_PACKER
except ImportError:
    _hiredis_pack = _HIREDIS_PACKER = None
# redis-py's own pack_command, blocking and asyncio: a connection class that overrides it (tracing,
# auditing) keeps every call of its own going through it.
_PACK = redis.connection.AbstractConnection.pack_command
_APACK = redis.asyncio.connection.AbstractConnection.pack_command


def packed_script_call(args: tuple) -> list[bytes] | None:
    """An EVALSHA's arguments as redis-py sends them, packed by hiredis alone; None without
    hiredis, or for an argument it refuses (a bytearray, a bool, None: redis-py's own packing
    then converts it or refuses it in its words). Text goes as UTF-8, numbers as repr() writes
    them, as redis-py's packers do with their default encoding."""
    if _hiredis_pack is None:
        return None
    with contextlib.suppress(TypeError):
        return [_hiredis_pack(args)]
    return None


class HiredisScriptCalls:
    """A redis.asyncio connection class's mixin: EVALSHA (the engine's script calls: an ack names
    each message) packed by hiredis, everything else by redis-py. Put on the pools of the clients
    delayq makes itself (connect.py): a user's own client is left as it is."""

    def pack_command(self, *args):
        if args and args[0] == "EVALSHA" and getattr(self.encoder, "encoding", None) == "utf-8" \
                and getattr(self.encoder, "encoding_errors", None) == "strict":
            packed = packed_script_call(args)
            if packed is not None:
                return packed
        return super().pack_command(*args)


def pack_scripts_with_hiredis(client) -> None:
    """Make the connections ``client``'s pool creates from now on HiredisScriptCalls of their
    class (TCP, TLS, Unix socket or Sentinel-managed alike); nothing without hiredis."""
    pool = getattr(client, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    if _hiredis_pack is None or cls is None or issubclass(cls, HiredisScriptCalls) \
            or getattr(cls, "pack_command", None) is not _APACK:   # a class of the user's own packs its calls
        return
    pool.connection_class = type(f"HiredisScripts{cls.__name__}", (HiredisScriptCalls, cls), {})


def _observed() -> bool:
    """Whether redis-py's own metrics (redis.observability) are on."""
    try:
        from redis.observability.recorder import is_enabled
    except ImportError:   # a redis-py without them
        return False
    return bool(is_enabled())


class OwnConnection:
    """``client`` for one thread's steps (queue_core.steps.run), with EVALSHA on a kept connection.
    Not thread-safe: one per thread, ``close()`` when the thread's routine ends."""

    def __init__(self, client):
        self._client = client
        self._pool = client.connection_pool
        self._conn = None

    @classmethod
    def of(cls, client) -> "OwnConnection | None":
        """One for a plain blocking client on one server (Sentinel's included); None where keeping
        a connection would change what the user set up: a cluster client (it picks a node per
        key), an asyncio one, one that keeps a single connection already, a pool that waits for a
        free connection or holds few (a kept one would starve the others, or the thread itself
        when a NOSCRIPT reload takes another), client-side caching, a client whose commands are
        instrumented (OpenTelemetry, Sentry and the like wrap ``execute_command``; a subclass may
        override it) or redis-py's own metrics being on: those would stop seeing claims and acks."""
        if not isinstance(client, redis.Redis) or client.connection is not None:
            return None
        pool = client.connection_pool
        if isinstance(pool, redis.BlockingConnectionPool) or (pool.max_connections or 0) < MIN_POOL \
                or getattr(pool, "cache", None) is not None:   # client-side caching: its invalidations ride the pool
            return None
        execute, evalsha = type(client).execute_command, type(client).evalsha
        if execute is not _EXECUTE or hasattr(execute, "__wrapped__") or evalsha is not _EVALSHA \
                or hasattr(evalsha, "__wrapped__") or _observed():
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
        else:
            self._check(conn)
        packed = None
        if type(getattr(conn, "_command_packer", None)) is _HIREDIS_PACKER is not None \
                and type(conn).pack_command is _PACK:   # not a class of the user's own that packs its calls
            packed = packed_script_call(("EVALSHA", sha, numkeys, *keys_and_args))   # the same bytes
        if packed is None:
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

    def _check(self, conn) -> None:
        """What the pool does to a connection it hands out, for the kept one before each call: one
        the server closed while it sat idle (its ``timeout``, a restart, a failover's CLIENT KILL)
        reconnects now instead of failing the call; a token the pool renewed (re-authentication)
        is sent first."""
        try:
            # Data nobody asked for, or the server's close (as the pool: push messages of
            # maintenance notifications are the reply reader's to handle; a client-caching pool
            # keeps no connection here, OwnConnection.of).
            if conn.can_read() and not getattr(self._pool, "maint_notifications_enabled", lambda: False)():
                raise RedisConnectionError("connection not ready")
        except (RedisConnectionError, RedisTimeoutError, OSError):
            conn.disconnect()   # send_packed_command connects again
        if getattr(conn, "_re_auth_token", None) is not None:
            conn.connect()
            conn.re_auth()

    def close(self) -> None:
        """Give the kept connection back to the pool."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.release(conn)
