"""The two clients, side by side: ``DelayQueue`` on a blocking redis-py client and
``AsyncDelayQueue`` on ``redis.asyncio``. Both are the same engine (queue_core.engine: one module
per family of Lua scripts) and differ only in how they drive an operation: run to its result, or
await it.

Every call that acts on messages takes ``group=`` (default ``"default"``): groups are independent
consumers of the same messages. Calls on message ids find the partition from the id itself.
"""

import contextlib
import threading

from .engine import ClaimResult, Failure, QueueEngine
from .own_connection import OwnConnection
from .steps import arun, run

__all__ = ["AsyncDelayQueue", "ClaimResult", "DelayQueue", "Failure", "QueueEngine"]


class _ThreadState(threading.local):
    own: OwnConnection | None = None   # set inside DelayQueue._own_connection() (a class default: no
                                       # AttributeError raised and caught on every other thread's call)


class DelayQueue(QueueEngine):
    """A Redis delay queue on a blocking redis-py client (EngineBase says what ``actor`` and
    ``wait_replicas`` do). Thread-safe: share one instance (and its connection pool) per process."""

    _threads: _ThreadState | None = None   # None: a subclass whose __init__ skipped ours (no own connections)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._threads = _ThreadState()

    def _drive(self, steps):
        """Run an operation (queue_core.steps) to its result with this blocking client (or the
        calling thread's own connection)."""
        threads = self._threads
        return run(steps, threads is not None and threads.own or self.redis)

    @contextlib.contextmanager
    def _own_connection(self):
        """Within it, the calling thread's script calls (claim, ack, nack, ...) go out on one
        connection it keeps, past redis-py's per-call pool round and wrappers (~40 us a call:
        queue_core/own_connection.py); given back to the pool at the end. For a thread that calls
        the queue in a loop, as a worker's fetcher and settler do. Nothing changes where
        OwnConnection.of says no (a cluster client, a small or blocking pool, instrumented
        commands, ...)."""
        own = OwnConnection.of(self.redis) if self._threads is not None else None
        if own is None or self._threads.own is not None:
            yield
            return
        self._threads.own = own
        try:
            yield
        finally:
            self._threads.own = None
            own.close()


class AsyncDelayQueue(QueueEngine):
    """DelayQueue on a ``redis.asyncio`` client: ``await q.publish(...)``, ``await q.claim(...)``
    and so on. ``keys()`` (no I/O) stays a plain method. Create it inside the event loop that uses
    it (a redis.asyncio client belongs to one loop) and ``await q.aclose()`` at the end, or use
    ``async with``."""

    _asyncio = True

    def _drive(self, steps):
        return arun(steps, self.redis)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.redis.aclose()

    async def __aenter__(self) -> "AsyncDelayQueue":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
