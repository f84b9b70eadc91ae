"""A blocking facade over AsyncDelayQueue, so the engine suite's tests drive the asyncio client
unchanged: each coroutine method runs on a private event loop in its own thread and the caller
waits for its result (or its exception). ``redis`` is a blocking client of the same database, for
the tests' own inspection of keys; everything else goes to the AsyncDelayQueue."""

import asyncio
import inspect
import threading

import redis

from queue_core import Batch


class BlockingAsyncQueue:
    def __init__(self, cls, url: str):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="async-queue-loop", daemon=True)
        self._thread.start()

        async def make():   # the asyncio client must be made in the loop that uses it
            return cls.from_url(url, actor="test")
        self._queue = self._wait(make())
        self.redis = redis.Redis.from_url(url)

    def _wait(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=120)

    def __getattr__(self, name):
        value = getattr(self._queue, name)
        if not callable(value) or inspect.isclass(value):
            return value

        def call(*args, **kwargs):
            result = value(*args, **kwargs)
            if isinstance(result, Batch):
                result.queue = self   # its calls go through this facade too
            return self._wait(result) if inspect.isawaitable(result) else result
        return call

    def close(self) -> None:
        self._wait(self._queue.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self.redis.close()
