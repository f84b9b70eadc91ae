"""The two clients, side by side: ``DelayQueue`` on a blocking redis-py client and
``AsyncDelayQueue`` on ``redis.asyncio``. Both are the same engine (queue_core.engine: one module
per family of Lua scripts) and differ only in how they drive an operation: run to its result, or
await it.

Every call that acts on messages takes ``group=`` (default ``"default"``): groups are independent
consumers of the same messages. Calls on message ids find the partition from the id itself.
"""

from .engine import ClaimResult, Failure, QueueEngine
from .steps import arun, run

__all__ = ["AsyncDelayQueue", "ClaimResult", "DelayQueue", "Failure", "QueueEngine"]


class DelayQueue(QueueEngine):
    """A Redis delay queue on a blocking redis-py client (EngineBase says what ``actor`` and
    ``wait_replicas`` do). Thread-safe: share one instance (and its connection pool) per process."""

    def _drive(self, steps):
        """Run an operation (queue_core.steps) to its result with this blocking client."""
        return run(steps, self.redis)


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
