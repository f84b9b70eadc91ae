"""asyncio: ``AsyncWorker`` for ``async def`` handlers (``AsyncDelayQueue``, the client, is in
queue_core.queue beside DelayQueue; importing it from here keeps working)."""

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping

import redis

from .errors import InvalidArgument, QueueError, WorkerCrashed
from .ids import new_id
from .keys import DEFAULT_GROUP, WAKE_KEY_TTL_MS, validate_group, wake_key
from .message import Delivery, Message, Reject
from .metrics import NO_METRICS, NoMetrics
from .queue import AsyncDelayQueue  # noqa: F401 - its old import path
from .worker import (
    HEARTBEAT_EVERY,
    LAYOUT_EVERY,
    FetchSchedule,
    HeldMessage,
    Waker,
    batch_result,
    corrupt_outcomes,
    hold,
    inbox_items,
    leases_due,
    report_acks,
    report_extended,
    report_nacks,
    split_outcomes,
    unstarted,
)

log = logging.getLogger("delayq.worker")

AsyncHandler = Callable[[Message], Awaitable[None]]

ASYNC_WAKE_EARLY_MS = 0.6   # the push from the loop takes a round trip; the rest is yielded away
_STOP = object()


def is_async_callable(handler) -> bool:
    # an async def function (or a partial of one), or an object whose __call__ is one
    return inspect.iscoroutinefunction(handler) or (
        callable(handler) and inspect.iscoroutinefunction(type(handler).__call__))


class AsyncWorker:
    """Consume ``handlers`` = {topic: async handler} for one consumer ``group`` in the running
    event loop, ``concurrency`` handlers at a time.

    Same rules as the blocking Worker: returning acks, raising nacks (retry by the group's
    policy), raising ``Reject`` dead-letters at once; with ``batch=N`` the handler gets a list
    of up to N messages and may return ``{message id: exception}`` for the failed ones. Fetching sleeps until the next due time
    (blocked in Redis on the partitions' signal lists, woken on the dot by a timer), acks and
    nacks of everything finished meanwhile go in one script call per partition, leases are
    extended while a handler runs (up to ``max_lease``), and a heartbeat shows the worker on the
    dashboard. On SIGTERM/SIGINT (or ``stop()``): claiming stops, prefetched messages not started
    go back to ready at once, handlers get ``grace`` seconds to finish; what is left is redelivered
    after its lease."""

    def __init__(self, queue: AsyncDelayQueue, handlers: Mapping[str, AsyncHandler], *,
                 group: str = DEFAULT_GROUP, concurrency: int = 8, prefetch: int | None = None,
                 batch_size: int = 100, batch: int | None = None, max_lease: float = 3600.0, grace: float = 30.0,
                 idle_wait: float = 2.0, name: str | None = None, metrics: NoMetrics | None = None):
        if not isinstance(queue, AsyncDelayQueue):
            raise InvalidArgument("AsyncWorker needs an AsyncDelayQueue; a DelayQueue goes with queue_core.Worker")
        if not handlers:
            raise InvalidArgument("a worker needs at least one topic handler")
        if concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        if batch is not None and not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000 messages")
        for topic, handler in handlers.items():
            queue.keys(topic)   # validates the name now
            if not is_async_callable(handler):
                raise InvalidArgument(
                    f"the handler for {topic!r} is not an async function; AsyncWorker awaits its handlers. Use "
                    "queue_core.Worker for blocking handlers, or wrap the call in asyncio.to_thread")
        self.queue = queue
        self.group = validate_group(group)
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.batch = batch
        self.batch_size = max(1, batch_size, batch or 1)
        self.capacity = concurrency * (batch or 1) + (prefetch if prefetch is not None else self.batch_size)
        self.max_lease = max_lease
        self.grace = grace
        self.idle_wait = idle_wait
        self.name = name or f"{queue.actor}:{new_id()[-6:]}"
        self.processed = 0
        self.failed = 0
        self.crashed: str | None = None
        self.metrics = metrics or NO_METRICS
        self.metrics.watch_in_flight(lambda: len(self._held))
        self._held: dict[tuple[str, int, str], HeldMessage] = {}
        self._wake_keys: set[str] = set()
        self._free = self.capacity
        self._background: set[asyncio.Task] = set()
        self._stopping: asyncio.Event | None = None   # made in run(): an Event belongs to a loop
        self._hard_stop: asyncio.Event | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get ``grace`` seconds to finish. Call it from the
        worker's event loop (or use loop.call_soon_threadsafe)."""
        if self._stopping is None or self._stopping.is_set():
            return
        self._stopping.set()
        self._capacity_changed.set()
        self._spawn(self._wake_fetchers())

    def _spawn(self, coro) -> None:
        """Run ``coro`` in the background, holding a reference until it ends (the loop keeps
        only weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def run(self, install_signal_handlers: bool = True) -> None:
        """Run until stop() or SIGTERM/SIGINT (a second signal abandons in-flight work at once)."""
        loop = asyncio.get_running_loop()
        self._stopping, self._hard_stop = asyncio.Event(), asyncio.Event()
        self._capacity_changed = asyncio.Event()
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._outcomes: asyncio.Queue = asyncio.Queue()
        self._keeper_wake = asyncio.Event()
        # Everything that can fail (a cluster's layout reads) comes before anything is started.
        partitions = {}
        if self.queue.cluster:   # a blocking wait cannot span hash slots there: one fetcher per partition
            for topic in self.handlers:
                partitions[topic] = range((await self.queue.layout(topic)).partitions)
        installed = []
        if install_signal_handlers:
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(signum, self._on_signal, signum)
                    installed.append(signum)
        log.info("async worker %s: topics %s, group %s, concurrency %d", self.name, ", ".join(self.handlers),
                 self.group, self.concurrency)
        self._waker = Waker(lambda keys: self._from_waker(loop, keys), threading.Event())
        self._waker.start()
        fetchers = []
        for topic in self.handlers:
            if topic in partitions:
                fetchers += [self._task(self._fetch_loop(topic, p), f"fetch-{topic}-{p}") for p in partitions[topic]]
            else:
                fetchers.append(self._task(self._fetch_loop(topic, None), f"fetch-{topic}"))
        runners = [self._task(self._handle_loop(), f"handler-{i}") for i in range(self.concurrency)]
        settler = self._task(self._settle_loop(), "settler")
        keeper = self._task(self._keep_loop(), "keeper")
        try:
            await self._stopping.wait()
            await asyncio.gather(*fetchers, return_exceptions=True)
            await self._release_unstarted()
            for _ in runners:
                self._inbox.put_nowait(_STOP)
            # Handlers finish within grace, unless a second signal says not to wait.
            finished = asyncio.gather(*runners, return_exceptions=True)
            hard = loop.create_task(self._hard_stop.wait())
            await asyncio.wait([finished, hard], timeout=self.grace, return_when=asyncio.FIRST_COMPLETED)
            hard.cancel()
            for t in runners:
                if not t.done():
                    t.cancel()   # past grace or a second signal: its message returns after its lease
            await asyncio.gather(*runners, return_exceptions=True)
            self._outcomes.put_nowait(_STOP)
            await asyncio.wait([settler], timeout=max(5.0, self.grace))
        finally:
            self._hard_stop.set()
            self._keeper_wake.set()
            for t in (*fetchers, *runners, settler, keeper):
                if not t.done():
                    t.cancel()
            await asyncio.gather(*fetchers, *runners, settler, keeper, return_exceptions=True)
            self._waker.stop()
            for signum in installed:
                loop.remove_signal_handler(signum)
            with contextlib.suppress(redis.RedisError):
                await self.queue.heartbeat(self.handlers, self.name, remove=True, group=self.group)
                for key in self._wake_keys:
                    await self.queue.redis.delete(key)
        log.info("async worker %s stopped: %d processed, %d failed", self.name, self.processed, self.failed)
        if self.crashed:
            raise WorkerCrashed(f"worker {self.name} stopped because its task {self.crashed} failed; restart it "
                                "(messages it held return after their lease)")

    def _from_waker(self, loop, keys: list[str]) -> None:
        """The waker thread's due time: push to the wake lists from the loop."""
        with contextlib.suppress(RuntimeError):   # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(lambda: self._spawn(self._push_wake(*keys)))

    def _on_signal(self, signum: int) -> None:
        if self._stopping.is_set():
            self._hard_stop.set()
        log.info("async worker %s: %s received, stopping", self.name, signal.Signals(signum).name)
        self.stop()

    def _task(self, coro, name: str) -> asyncio.Task:
        """A task that stops the whole worker if it fails: a worker missing its fetcher or settler
        would keep its heartbeat and claim nothing (or never ack) without a word."""
        async def guarded():
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self.crashed = f"{name}: {exc!r}"
                log.critical("async worker %s: task %s failed; stopping the worker", self.name, name, exc_info=True)
                self.stop()
        return asyncio.get_running_loop().create_task(guarded(), name=f"dq-{name}")

    async def _wake_fetchers(self) -> None:
        # As the blocking worker: end every fetcher's BLPOP (own wake lists and one token per partition).
        with contextlib.suppress(redis.RedisError):
            for key in list(self._wake_keys):
                await self._push_wake(key)
            for topic in self.handlers:
                layout = await self.queue.layout(topic)
                for key in self._signal_keys(topic, range(layout.partitions)):
                    await self.queue.redis.rpush(key, "1")

    async def _push_wake(self, *keys: str) -> None:
        try:
            async with self.queue.redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.rpush(key, "1")
                    pipe.pexpire(key, WAKE_KEY_TTL_MS)
                await pipe.execute()
        except redis.RedisError as exc:
            log.warning("waking a fetcher failed (%s); it wakes at its own timeout", exc)

    async def _release_unstarted(self) -> None:
        items = []
        while not self._inbox.empty():
            items.append(self._inbox.get_nowait())
        waiting = unstarted(items)
        if not waiting:
            return
        self._release_capacity(len(waiting))
        try:
            n = await self.queue.release(waiting, actor=self.name)
            log.info("async worker %s: %d claimed but unstarted messages given back", self.name, n)
        except (QueueError, redis.RedisError) as exc:
            log.warning("async worker %s: giving back %d unstarted messages failed (%s); they return after "
                        "their lease", self.name, len(waiting), exc)
        self._forget(waiting)

    # -- capacity ------------------------------------------------------------------------------

    async def _reserve(self, most: int) -> int:
        while self._free == 0 and not self._stopping.is_set():
            self._capacity_changed.clear()
            await self._capacity_changed.wait()
        if self._stopping.is_set():
            return 0
        n = min(most, self._free)
        self._free -= n
        return n

    def _release_capacity(self, n: int) -> None:
        if n:
            self._free += n
            self._capacity_changed.set()

    # -- fetching ------------------------------------------------------------------------------

    def _signal_keys(self, topic: str, partitions) -> list[str]:
        return [self.queue.keys(topic, p, self.group).signal for p in partitions]

    async def _fetch_loop(self, topic: str, only: int | None) -> None:
        q = self.queue
        schedule = FetchSchedule(self.idle_wait)
        failures = 0
        parts: list[int] = []
        layout_checked = -LAYOUT_EVERY
        while not self._stopping.is_set():
            if time.monotonic() - layout_checked >= LAYOUT_EVERY:
                try:
                    count = (await q.layout(topic, fresh=True)).partitions
                except redis.RedisError as exc:
                    failures += 1
                    log.warning("async worker %s: reading %r's layout failed (%s); retrying", self.name, topic, exc)
                    await self._pause(min(5.0, 0.1 * 2 ** failures))
                    continue
                parts = [p for p in range(count) if only is None or p == only]
                layout_checked = time.monotonic()
                if not parts:
                    return
            n = await self._reserve(self.batch_size)
            if n == 0:
                break
            now_r = schedule.now_r()
            remaining, more = n, False
            try:
                for p in schedule.order(parts):
                    if schedule.waiting(p, now_r):
                        continue
                    if remaining == 0:
                        more = True
                        break
                    res = await q.claim_batch(topic, remaining, actor=self.name, group=self.group, partition=p)
                    more = schedule.claimed(p, res, remaining) or more
                    remaining -= len(res.deliveries)
                    self._dispatch(res.deliveries)
                failures = 0
            except redis.RedisError as exc:
                failures += 1
                log.warning("async worker %s: claim from %r failed (%s); retrying", self.name, topic, exc)
                self._release_capacity(remaining)
                await self._pause(min(5.0, 0.1 * 2 ** failures))
                continue
            self._release_capacity(remaining)
            if not more:
                await self._sleep_until_due(topic, parts, schedule)

    async def _pause(self, seconds: float) -> None:
        """Sleep, but end early when the worker stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _dispatch(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        hold(self._held, deliveries, self.metrics)
        for item in inbox_items(deliveries, self.batch):
            self._inbox.put_nowait(item)
        self._keeper_wake.set()

    async def _sleep_until_due(self, topic: str, parts: list[int], schedule: FetchSchedule) -> None:
        """As the blocking worker: BLPOP on the partitions' signal lists until the next due time;
        for a real due time the Waker thread has the loop push to this fetcher's wake list then."""
        wait = schedule.next_wait(parts)
        if wait is None:
            return
        keys = self._signal_keys(topic, parts)
        wait_ms, next_r = wait
        if next_r is None:
            schedule.signalled(parts, keys, await self._block(keys, wait_ms))
            return
        own = wake_key(keys[0], f"{self.name}:{topic}:{parts[0] if len(parts) == 1 else 'all'}")
        self._wake_keys.add(own)
        self._waker.set(own, (next_r - schedule.offset_ms - ASYNC_WAKE_EARLY_MS) / 1000)
        try:
            woke = await self._block([*keys, own], wait_ms + 1000)
        finally:
            self._waker.clear(own)
        schedule.signalled(parts, keys, woke)
        if woke == own and (rest := schedule.rest_after_wake(next_r)):
            # Woken a fraction of a millisecond early: the loop's own sleep would round that up to
            # a whole one, so yield to the other tasks until the due time instead.
            until = time.monotonic() + rest
            while time.monotonic() < until:
                await asyncio.sleep(0)

    async def _block(self, keys: list[str], ms: float) -> str | None:
        try:
            got = await self.queue.redis.blpop(keys, timeout=max(ms, 1) / 1000)
            return got[0].decode() if got else None
        except redis.RedisError as exc:
            log.warning("async worker %s: waiting for a signal failed (%s)", self.name, exc)
            await self._pause(min(ms, 1000) / 1000)
            return None

    # -- handling and settling -----------------------------------------------------------------

    async def _handle_loop(self) -> None:
        while True:
            item = await self._inbox.get()
            if item is _STOP:
                return
            if isinstance(item, list):
                self._outcomes.put_nowait(await self._run_batch(item))
                self._release_capacity(len(item))
            else:
                self._outcomes.put_nowait([(item, await self._run_one(item))])
                self._release_capacity(1)

    async def _run_batch(self, ds: list[Delivery]) -> list[tuple[Delivery, BaseException | None]]:
        """As the blocking worker's batch: one call with the list; see Worker."""
        topic = ds[0].topic
        outcomes, good = corrupt_outcomes(ds)
        if good:
            started = time.perf_counter()
            try:
                batch_result(outcomes, await self.handlers[topic]([d.message for d in good]))
            except Exception as exc:  # noqa: BLE001 - the whole batch failed
                outcomes.update(dict.fromkeys((d.id for d in good), exc))
            self.metrics.handled(topic, time.perf_counter() - started, len(good))
        return [(d, outcomes.get(d.id)) for d in ds]

    async def _run_one(self, d: Delivery) -> BaseException | None:
        started = time.perf_counter()
        try:
            if d.message.corrupt:
                raise Reject(f"corrupt message: {d.message.corrupt}")
            await self.handlers[d.topic](d.message)
            return None
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        finally:
            self.metrics.handled(d.topic, time.perf_counter() - started)

    async def _settle_loop(self) -> None:
        """Ack and nack whatever finished since the last call, in one script call per partition."""
        finishing = False
        while not finishing:
            first = await self._outcomes.get()
            batch = []
            if first is _STOP:
                finishing = True
            else:
                batch += first
            while len(batch) < 1000 and not self._outcomes.empty():
                item = self._outcomes.get_nowait()
                if item is _STOP:
                    finishing = True
                    break
                batch += item
            if batch:
                await self._settle(batch)

    async def _settle(self, outcomes: list[tuple[Delivery, BaseException | None]]) -> None:
        acks, failures = split_outcomes(outcomes)
        if acks:
            try:
                report_acks(self, acks, await self.queue.ack_many(acks, actor=self.name))
            except (QueueError, redis.RedisError) as exc:
                log.error("async worker %s: ack of %d messages failed (%s); they return after their lease",
                          self.name, len(acks), exc)
            self.processed += len(acks)
        if failures:
            self.failed += len(failures)
            try:
                report_nacks(self, failures, await self.queue.nack_many(failures, actor=self.name))
            except (QueueError, redis.RedisError) as exc:
                log.error("async worker %s: nack of %d messages failed (%s); they return after their lease",
                          self.name, len(failures), exc)
        self._forget([d for d, _ in outcomes])

    def _forget(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            self._held.pop((d.topic, d.partition, d.id), None)

    # -- leases and heartbeats -----------------------------------------------------------------

    async def _keep_loop(self) -> None:
        last_beat = 0.0
        while not self._hard_stop.is_set():
            shortest = min((h.lease_s for h in self._held.values()), default=4.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._keeper_wake.wait(), max(0.005, min(1.0, shortest / 4)))
            self._keeper_wake.clear()
            if self._hard_stop.is_set():
                break
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_EVERY:
                try:
                    await self.queue.heartbeat(self.handlers, self.name, group=self.group)
                    last_beat = now
                except redis.RedisError as exc:
                    log.warning("async worker %s: heartbeat failed (%s)", self.name, exc)
            await self._extend_leases(now)

    async def _extend_leases(self, now: float) -> None:
        for lease_s, held in leases_due(self._held.values(), now, self.max_lease).items():
            try:
                results = await self.queue.extend_many([h.delivery for h in held], lease_s)
            except redis.RedisError as exc:
                log.warning("async worker %s: extending %d leases failed (%s)", self.name, len(held), exc)
                continue
            report_extended(self.metrics, held, results, now)
