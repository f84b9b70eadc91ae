"""Old import path of the asyncio side, kept for one release: ``AsyncWorker`` is in
queue_core.worker (async_worker.py), ``AsyncDelayQueue`` in queue_core.queue beside DelayQueue."""

from .queue import AsyncDelayQueue
from .worker.async_worker import ASYNC_WAKE_EARLY_MS, AsyncHandler, AsyncWorker, is_async_callable

__all__ = ["ASYNC_WAKE_EARLY_MS", "AsyncDelayQueue", "AsyncHandler", "AsyncWorker", "is_async_callable"]
