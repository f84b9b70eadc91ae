"""cancel(..., running=True) end to end, through both workers: a real handler that loops, the
worker hearing of the cancel at its next lease extension (within a second), the thread worker's
``check_cancelled()`` raising ``Cancelled``, the asyncio worker cancelling the handler's task, and
nothing acked or nacked for the cancelled delivery afterwards. (The engine side: test_cancel.py.)"""

import asyncio
import threading
import time

from queue_core import AsyncDelayQueue, AsyncWorker, Cancelled, DelayQueue, MessageState, Worker
from tests.conftest import run_async

from .helpers import assert_counts, poll, running

HEARD_WITHIN = 1.0   # seconds from the cancel call to the handler stopping (the contract)


def _assert_cancelled_dead(q, mid, actor):
    m = q.get("t", mid)
    assert m.state is MessageState.dead
    assert m.history[-1].event == "cancelled" and m.history[-1].actor == actor
    assert m.last_error.message == f"cancelled by {actor}"


def test_thread_worker_handler_stops_at_check_cancelled_within_a_second(engine_url):
    """The handler's check_cancelled() raises within 1 s of the cancel; the worker settles
    nothing for it and goes on with other work."""
    q = DelayQueue.from_url(engine_url, actor="test")
    q.configure_topic("t", visibility_timeout=30)   # the lease alone would not end it for 15 s
    started, seen, handled = threading.Event(), {}, []

    def handler(m):
        if m.text() != "long":
            handled.append(m.text())
            return
        started.set()
        for _ in range(2000):   # 20 s of steps unless cancelled
            try:
                m.check_cancelled()
            except Cancelled:
                seen["at"], seen["flag"] = time.monotonic(), m.cancelled
                raise
            time.sleep(0.01)   # one step of the handler's own work
    mid = q.publish("t", "long")
    with running(Worker(q, {"t": handler}, concurrency=2)) as worker:
        assert started.wait(5)
        time.sleep(0.5)   # mid-way through the work, past the first lease checks
        t0 = time.monotonic()
        q.cancel("t", mid, running=True, actor="ops")
        poll(lambda: "at" in seen, timeout=5)
        latency = seen["at"] - t0
        q.publish("t", "next")
        poll(lambda: handled == ["next"] and q.stats("t").get("acked") == 1)
    print(f"thread worker heard of the cancel after {latency * 1000:.0f} ms")
    assert latency < HEARD_WITHIN and seen["flag"]
    _assert_cancelled_dead(q, mid, "ops")
    assert_counts(q, "t", dead=1)
    stats = q.stats("t")
    assert stats.get("nacked", 0) == 0 and stats.get("cancelled") == 1 and worker.failed == 0


def test_thread_worker_never_acks_a_cancelled_message_whose_handler_ignores_it(engine_url):
    """A handler that returns anyway: the worker knows the lease is gone and sends no ack; the
    dead letter stays as the operator left it."""
    q = DelayQueue.from_url(engine_url, actor="test")
    q.configure_topic("t", visibility_timeout=30)
    started, release = threading.Event(), threading.Event()

    def handler(m):
        started.set()
        release.wait(10)   # ignores cancellation, then returns as if it succeeded
    mid = q.publish("t", "stubborn")
    with running(Worker(q, {"t": handler}, concurrency=1)) as worker:
        assert started.wait(5)
        q.cancel("t", mid, running=True, actor="ops")
        message = next(iter(worker._held)).message   # the worker's own copy of the message
        poll(lambda: message.cancelled, timeout=5)
        release.set()
        poll(lambda: not worker._held, timeout=5)
    _assert_cancelled_dead(q, mid, "ops")
    assert worker.processed == 0 and q.stats("t").get("acked", 0) == 0


def test_async_worker_cancels_the_handlers_task_within_a_second(engine_url):
    """The asyncio worker cancels the task awaiting the handler; the handler sees CancelledError,
    the worker goes on with the next message."""
    async def body():
        async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
            await q.configure_topic("t", visibility_timeout=30)
            started, seen, handled = asyncio.Event(), {}, []

            async def handler(m):
                if m.text() != "long":
                    handled.append(m.text())
                    return
                started.set()
                try:
                    await asyncio.sleep(20)   # the handler's long await
                except asyncio.CancelledError:
                    seen["at"], seen["flag"] = time.monotonic(), m.cancelled
                    raise
            mid = await q.publish("t", "long")
            worker = AsyncWorker(q, {"t": handler}, concurrency=1)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            await asyncio.wait_for(started.wait(), 5)
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            await q.cancel("t", mid, running=True, actor="ops")
            deadline = time.monotonic() + 5
            while "at" not in seen and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            latency = seen["at"] - t0
            await q.publish("t", "next")   # concurrency 1: runs only if the runner task survived
            while handled != ["next"] and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
            worker.stop()
            await task
            m = await q.get("t", mid)
            stats = await q.stats("t")
            return latency, seen["flag"], handled, m, stats, worker
    latency, flag, handled, m, stats, worker = run_async(body(), 30)
    print(f"asyncio worker cancelled the handler after {latency * 1000:.0f} ms")
    assert latency < HEARD_WITHIN and flag and handled == ["next"]
    assert m.state is MessageState.dead and m.history[-1].event == "cancelled" and m.history[-1].actor == "ops"
    assert stats.get("nacked", 0) == 0 and stats.get("acked") == 1 and worker.failed == 0


def test_remove_cancels_a_running_message_without_a_dead_letter(engine_url):
    """remove=True through a worker: the handler stops and the message is gone."""
    q = DelayQueue.from_url(engine_url, actor="test")
    q.configure_topic("t", visibility_timeout=30)
    started, stopped = threading.Event(), threading.Event()

    def handler(m):
        started.set()
        for _ in range(2000):
            if m.cancelled:
                stopped.set()
                return
            time.sleep(0.01)
    mid = q.publish("t", "long")
    with running(Worker(q, {"t": handler}, concurrency=1)) as worker:
        assert started.wait(5)
        q.cancel("t", mid, running=True, remove=True)
        assert stopped.wait(HEARD_WITHIN + 1)
    assert q.get("t", mid) is None and worker.processed == 0
    assert_counts(q, "t")


def test_finding_an_asyncio_handler_that_turns_its_cancel_into_an_error_leaves_the_worker_working(engine_url):
    """A review found a handler raising another error from its CancelledError (a failing cleanup)
    left the task's cancellation count at 1, and the next cancel ended the worker's handler loop:
    the worker then claimed messages it never ran. Two such cancels in a row, then a plain message
    is handled."""
    async def body():
        async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
            await q.configure_topic("t", visibility_timeout=30)
            started, handled = asyncio.Event(), []

            async def handler(m):
                if not m.text().startswith("long"):
                    handled.append(m.text())
                    return
                started.set()
                try:
                    await asyncio.sleep(20)
                except asyncio.CancelledError:
                    raise RuntimeError("cleanup failed") from None
            worker = AsyncWorker(q, {"t": handler}, concurrency=1)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            for name in ("long1", "long2"):
                started.clear()
                mid = await q.publish("t", name)
                await asyncio.wait_for(started.wait(), 5)
                await q.cancel("t", mid, running=True, actor="ops")
                deadline = time.monotonic() + 5
                while (await q.get("t", mid)).state is not MessageState.dead and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
            await q.publish("t", "after")
            deadline = time.monotonic() + 5
            while handled != ["after"] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            worker.stop()
            await asyncio.wait_for(task, 15)
            return handled, worker
    handled, worker = run_async(body(), 40)
    assert handled == ["after"] and not worker._held and not worker._cancel_asked
