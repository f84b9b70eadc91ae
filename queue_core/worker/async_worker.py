"""AsyncWorker: ``async def`` handlers in the running event loop, ``concurrency`` at a time (the
rules it shares with the thread Worker are in rules.py and base.py; this is its loop)."""

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable

from ..errors import Cancelled, InvalidArgument
from ..message import Delivery, Message, Reject
from ..queue import AsyncDelayQueue
from ..steps import Steps, arun
from .base import RUN_FLUSH, BaseWorker
from .rules import STOP, Waker, batch_result, corrupt_outcomes, waking

log = logging.getLogger("delayq.worker")

AsyncHandler = Callable[[Message], Awaitable[None]]

ASYNC_WAKE_EARLY_MS = 0.6   # the push from the loop takes a round trip; the rest is yielded away


def is_async_callable(handler) -> bool:
    # an async def function (or a partial of one), or an object whose __call__ is one
    return inspect.iscoroutinefunction(handler) or (
        callable(handler) and inspect.iscoroutinefunction(type(handler).__call__))


class AsyncWorker(BaseWorker):
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

    kind = "async worker"
    unit = "task"
    runtime = "asyncio"
    wake_early_ms = ASYNC_WAKE_EARLY_MS

    def _check_queue(self, queue) -> None:
        if not isinstance(queue, AsyncDelayQueue):
            raise InvalidArgument("AsyncWorker needs an AsyncDelayQueue; a DelayQueue goes with queue_core.Worker")

    def _check_handler(self, topic: str, handler: Callable) -> None:
        if not is_async_callable(handler):
            raise InvalidArgument(
                f"the handler for {topic!r} is not an async function; AsyncWorker awaits its handlers. Use "
                "queue_core.Worker for blocking handlers, or wrap the call in asyncio.to_thread")

    def _make_state(self) -> None:
        # Handler tasks inside a handler now (task -> its delivery), and those whose cancellation
        # this worker asked for (an operator cancelled the message: _cancelled): each is taken
        # back exactly once when that handler ends, however it ends.
        self._in_handler: dict[asyncio.Task, Delivery] = {}
        self._cancel_asked: set[asyncio.Task] = set()
        self._free = self.capacity
        self._needs: list[int] = []   # the free capacity each waiting fetcher waits for
        self._background: set[asyncio.Task] = set()
        self._stop_waking: asyncio.Task | None = None   # stop()'s task that wakes the fetchers
        self._stop: asyncio.Event | None = None   # made in run(): an Event belongs to a loop
        self._hard_stop: asyncio.Event | None = None

    async def _drive(self, routine: Steps):
        try:
            return await arun(routine, self.queue.redis)
        finally:
            # Cancelled mid-step: run the routine's own finally blocks now, not whenever the
            # task's traceback lets go of it.
            routine.close()

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get ``grace`` seconds to finish. Call it from the
        worker's event loop (or use loop.call_soon_threadsafe)."""
        if self._stop is None or self._stop.is_set():
            return
        self._stop.set()
        self._capacity_changed.set()
        self._stop_waking = self._spawn(self._drive(self._waking_fetchers()))

    def _spawn(self, coro) -> asyncio.Task:
        """Run ``coro`` in the background, holding a reference until it ends (the loop keeps
        only weak ones)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def run(self, install_signal_handlers: bool = True) -> None:
        """Run until stop() or SIGTERM/SIGINT (a second signal abandons in-flight work at once)."""
        loop = asyncio.get_running_loop()
        self._stop, self._hard_stop = asyncio.Event(), asyncio.Event()
        self._capacity_changed = asyncio.Event()
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._outcomes: asyncio.Queue = asyncio.Queue()
        self._keeper_wake = asyncio.Event()
        # Everything that can fail (a cluster's layout reads) comes before anything is started; a
        # stop() meanwhile has started its wake-up task, which ends before run() does.
        try:
            await asyncio.to_thread(self._build_scripts)   # tens of ms of Python: not on the loop
            if self.queue.cluster:   # a blocking wait cannot span hash slots there: one fetcher per partition
                for topic in self.handlers:
                    self._fetched[topic] = set(range((await self.queue.layout(topic)).partitions))
        except BaseException:
            await self._stop_waking_ended()
            raise
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
        self._fetchers: list[asyncio.Task] = []
        for topic in self.handlers:
            if topic in self._fetched:
                for p in sorted(self._fetched[topic]):
                    self._start_fetcher(topic, p)
            else:
                self._fetchers.append(self._task(self._drive(self._fetching(topic, None)), f"fetch-{topic}"))
        runners = [self._task(self._handle_loop(), f"handler-{i}") for i in range(self.concurrency)]
        settler = self._task(self._drive(self._settling_loop()), "settler")
        keeper = self._task(self._drive(self._keeping()), "keeper")
        try:
            await self._stop.wait()
            # Until none is left: a fetcher may have started another (a partition added) meanwhile.
            while pending := [t for t in self._fetchers if not t.done()]:
                await asyncio.gather(*pending, return_exceptions=True)
            await self._drive(self._releasing_unstarted())
            for _ in runners:
                self._inbox.put_nowait(STOP)
            # Handlers finish within grace, unless a second signal says not to wait.
            finished = asyncio.gather(*runners, return_exceptions=True)
            hard = loop.create_task(self._hard_stop.wait())
            await asyncio.wait([finished, hard], timeout=self.grace, return_when=asyncio.FIRST_COMPLETED)
            hard.cancel()
            for t in runners:
                if not t.done():
                    t.cancel()   # past grace or a second signal: its message returns after its lease
            await asyncio.gather(*runners, return_exceptions=True)
            self._outcomes.put_nowait(STOP)
            await asyncio.wait([settler], timeout=max(5.0, self.grace))
        finally:
            self._hard_stop.set()
            self._keeper_wake.set()
            for t in (*self._fetchers, *runners, settler, keeper):
                if not t.done():
                    t.cancel()
            await asyncio.gather(*self._fetchers, *runners, settler, keeper, return_exceptions=True)
            self._waker.stop()
            for signum in installed:
                loop.remove_signal_handler(signum)
            await self._drive(self._leaving())
            await self._stop_waking_ended()
        self._finish_run()

    async def _stop_waking_ended(self) -> None:
        """stop()'s wake-up of the fetchers ends before run() does: the caller may close the
        client next (cancelled past 5 s: Redis unreachable)."""
        if (waking := self._stop_waking) is not None and not waking.done():
            await asyncio.wait([waking], timeout=5)
            waking.cancel()
            await asyncio.gather(waking, return_exceptions=True)

    def _start_fetcher(self, topic: str, partition: int) -> None:
        self._fetchers.append(self._task(self._drive(self._fetching(topic, partition)), f"fetch-{topic}-{partition}"))

    def _from_waker(self, loop, keys: list[str]) -> None:
        """The waker thread's due time: push to the wake lists from the loop."""
        with contextlib.suppress(RuntimeError):   # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(lambda: self._spawn(self._drive(waking(keys))))

    def _on_signal(self, signum: int) -> None:
        if self._stop.is_set():
            self._hard_stop.set()
        log.info("async worker %s: %s received, stopping", self.name, signal.Signals(signum).name)
        self.stop()

    def _task(self, coro, name: str) -> asyncio.Task:
        """A task that stops the whole worker if it fails (BaseWorker._crash)."""
        async def guarded():
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                self._crash(name, exc)
        return asyncio.get_running_loop().create_task(guarded(), name=f"dq-{name}")

    # -- how this worker waits -----------------------------------------------------------------

    async def _reserve(self, most: int, least: int = 1) -> int:
        least = max(1, min(least, most))
        if self._free < least and not self._stop.is_set():
            self._needs.append(least)   # each fetcher its own: one's claim never hides another's wait
            try:
                while self._free < least and not self._stop.is_set():
                    self._capacity_changed.clear()
                    await self._capacity_changed.wait()
            finally:
                self._needs.remove(least)
        if self._stop.is_set():
            return 0
        n = min(most, self._free)
        self._free -= n
        return n

    def _release_capacity(self, n: int) -> None:
        if n:
            self._free += n
            if self._needs and self._free >= min(self._needs):   # below every fetcher's wait, waking is wasted
                self._capacity_changed.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but end early when the worker stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _keeper_sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._keeper_wake.wait(), seconds)

    @staticmethod
    async def _sleep_rest(seconds: float) -> None:
        # Woken a fraction of a millisecond early: the loop's own sleep would round that up to
        # a whole one, so yield to the other tasks until the due time instead.
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            await asyncio.sleep(0)

    def _fetcher_name(self, topic: str, parts: list[int]) -> str:
        """What tells this fetcher's wake list from the others' (all share one thread)."""
        return f"{self.name}:{topic}:{parts[0] if len(parts) == 1 else 'all'}"

    # -- handling ------------------------------------------------------------------------------

    def _cancelled(self, deliveries: list[Delivery]) -> None:
        """Cancel the tasks of the handlers running these deliveries (each task runs a handler
        for one message at a time; a batch handler's task is not cancelled for one message:
        ``message.cancelled`` tells it). Called in the loop, so no task moves on meanwhile."""
        super()._cancelled(deliveries)
        cancelled = set(deliveries)
        for task, d in list(self._in_handler.items()):
            # Only a task inside the cancelled message's handler: one between two messages would
            # take the cancellation into the next message's handler (or out of its loop).
            if d in cancelled and task not in self._cancel_asked:
                self._cancel_asked.add(task)
                task.cancel()

    def _take_back_cancel(self) -> bool:
        """Take back the cancellation _cancelled asked for this task, once; whether it had."""
        task = asyncio.current_task()
        if task is None or task not in self._cancel_asked:
            return False
        self._cancel_asked.discard(task)
        if task.cancelling():
            task.uncancel()
        return True

    async def _handle_loop(self) -> None:
        while True:
            item = await self._inbox.get()
            if item is STOP:
                return
            if self.batch:
                with self._batch_running(item):
                    self._outcomes.put_nowait(await self._run_batch(item))
                done = len(item)
            else:   # a run of messages, one after the other (rules.inbox_items)
                run, outcomes, done = self._run_of(item), [], 0
                run.task = asyncio.current_task()   # cancelled when an operator cancels its message
                flushed = run.since
                try:
                    while run:   # the rest may go back (stopping) or to others (stuck) meanwhile
                        d = run.popleft()
                        run.since = now = time.monotonic()
                        run.current = d
                        if outcomes and now - flushed > RUN_FLUSH:   # slow handlers: ack as they finish
                            self._outcomes.put_nowait(outcomes)
                            outcomes, flushed = [], now
                        outcomes.append((d, await self._run_one(d)))
                        done += 1
                finally:
                    self._run_ended(run, outcomes)
            self._release_capacity(done)

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
        started = time.perf_counter() if self._timed else 0.0
        task = asyncio.current_task()
        try:
            message = d.message
            if message.corrupt:
                raise Reject(f"corrupt message: {message.corrupt}")
            message.check_cancelled()   # cancelled while it waited in this worker: never started
            self._in_handler[task] = d
            await self.handlers[message.topic](message)
            return None
        except asyncio.CancelledError as exc:
            # Ours (the message was cancelled: _cancelled) ends this message only; any other
            # cancellation (the worker stopping) ends the task.
            self._in_handler.pop(task, None)
            if self._take_back_cancel() and not task.cancelling():
                return Cancelled(f"message {d.id} of topic {d.topic!r} was cancelled while its handler ran")
            raise exc
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        finally:
            # Whatever the handler did with our cancellation (swallowed it, turned it into another
            # error), it is taken back here, so the task goes on to the next message.
            self._in_handler.pop(task, None)
            self._take_back_cancel()
            if self._timed:
                self.metrics.handled(d.topic, time.perf_counter() - started)
