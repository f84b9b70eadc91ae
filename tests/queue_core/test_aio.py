"""The asyncio client and worker. The engine suite runs every public-API test against
AsyncDelayQueue too (the ``client`` parameter of ``dq``); these are the asyncio side's own: the
API's shape, and AsyncWorker's handling, timing, leases and shutdown (signals: the CLI test,
in a process of its own)."""

import asyncio
import inspect
import os
import threading
import time

import pytest

from queue_core import (
    AsyncDelayQueue,
    AsyncWorker,
    DelayQueue,
    InvalidArgument,
    MessageState,
    Reject,
    RetryPolicy,
)
from queue_core.worker.base import WORKER_SCRIPTS
from queue_core.worker.inflight import call
from tests.conftest import run_async

from .helpers import assert_counts
from .test_cli import start_worker, stop_after


def public_methods(cls):
    return {name: getattr(cls, name) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name)) and name not in ("from_url", "aclose")}


def test_async_client_has_every_method_of_the_blocking_one_with_the_same_signature():
    sync, aio = public_methods(DelayQueue), public_methods(AsyncDelayQueue)
    assert set(sync) <= set(aio)
    for name, method in sync.items():
        assert inspect.signature(method) == inspect.signature(aio[name]), name
    # One engine: every method is the same function in both classes, only the driver differs.
    assert all(sync[name] is aio[name] for name in sync)
    assert DelayQueue._drive is not AsyncDelayQueue._drive


def run(coro, timeout=30):
    return run_async(coro, timeout)


async def with_queue(engine_url, body):
    async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
        return await body(q)


async def until(predicate, timeout=10.0):
    """Await ``predicate()`` (a coroutine function) until truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def started(worker):
    task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
    await asyncio.sleep(0)
    return task


def test_coroutines_return_what_the_blocking_client_returns(engine_url):
    async def body(q):
        assert inspect.iscoroutine(coro := q.counts("t"))
        await coro
        mid = await q.publish("t", {"n": 1}, key="k1")
        assert await q.publish("t", {"n": 2}, key="k1") == mid   # idempotent by key, as the blocking client
        [d] = await q.claim("t", 5)
        assert d.message.json() == {"n": 1}
        await q.ack(d)
        with pytest.raises(Exception) as lost:
            await q.ack(d)
        assert type(lost.value).__name__ == "LeaseLost"
        with pytest.raises(InvalidArgument):
            await q.publish("t", "x", ttl=-1)
        return await q.stats("t")
    assert run(with_queue(engine_url, body))["acked"] == 1


def test_worker_handles_retries_and_dead_letters(engine_url):
    async def body(q):
        await q.configure_topic("t", retry=RetryPolicy.fixed(0.05, max_attempts=2))
        ok = await q.publish_many("t", [str(i) for i in range(200)])
        bad = await q.publish("t", "fail")
        poison = await q.publish("t", "poison")
        seen = []

        async def handler(m):
            await asyncio.sleep(0)
            if m.text() == "poison":
                raise Reject("schema violation")
            if m.text() == "fail":
                raise ValueError(f"attempt {m.attempts}")
            seen.append(m.id)
        worker = AsyncWorker(q, {"t": handler}, concurrency=4)
        task = await started(worker)
        await until(lambda: _counts_are(q, "t", dead=2))
        worker.stop()
        await task
        assert sorted(seen) == sorted(ok)
        assert worker.processed == 200 and worker.failed == 3   # two attempts of "fail", one of "poison"
        assert (await q.get("t", bad)).last_error.message == "attempt 2"
        assert (await q.get("t", poison)).last_error.type == "Reject"
    run(with_queue(engine_url, body))


async def _counts_are(q, topic, **expected):
    counts = await q.counts(topic)
    return all(counts[s] == expected.get(s.value, 0) for s in MessageState)


def test_an_async_worker_builds_the_scripts_it_calls_off_the_loop_before_its_first_claim(engine_url):
    """As the blocking worker does (test_worker), in a thread: assembling a script is tens of ms
    of Python, which on the loop would hold every other task of the application."""
    async def body(q):
        assert not set(vars(q.scripts)) & set(WORKER_SCRIPTS)
        seen = []

        async def handler(m):
            seen.append(m.text())
        await q.publish("t", "one")
        worker = AsyncWorker(q, {"t": handler}, concurrency=1)
        built_on, build = [], worker._build_scripts
        worker._build_scripts = lambda: (built_on.append(threading.get_ident()), build())
        task = await started(worker)
        await until(lambda: _counts_are(q, "t"))
        assert seen == ["one"] and set(WORKER_SCRIPTS) <= set(vars(q.scripts))   # nack too: nothing failed
        assert built_on and threading.get_ident() not in built_on   # not on the event loop's thread
        worker.stop()
        await task
    run(with_queue(engine_url, body))


def test_finding_an_async_worker_that_fails_before_it_starts_still_waits_for_stops_wake_up(engine_url):
    """run() awaits (the script build, a cluster's layout reads) before it starts anything; a
    stop() in that time starts its wake-up of the fetchers, and a failure there must not return
    from run() before that task ends (the caller may close the client next)."""
    async def body(q):
        async def handler(m):
            pass
        worker = AsyncWorker(q, {"t": handler}, concurrency=1)
        entered, go_on, woke = threading.Event(), threading.Event(), []

        def failing_build():
            entered.set()
            go_on.wait(10)
            raise RuntimeError("build failed")

        def slow_waking():
            yield call(asyncio.sleep, 0.3)
            woke.append(True)
        worker._build_scripts, worker._waking_fetchers = failing_build, slow_waking
        task, deadline = await started(worker), time.monotonic() + 10
        while not entered.is_set():
            assert time.monotonic() < deadline, "run() never built its scripts"
            await asyncio.sleep(0.005)
        worker.stop()
        go_on.set()
        with pytest.raises(RuntimeError, match="build failed"):
            await task
        assert woke == [True]
    run(with_queue(engine_url, body))


def test_worker_is_on_time_and_never_early(engine_url):
    """Delayed messages reach the handler at their due time by Redis's clock: never early, and
    late by milliseconds (the timer wakes the blocked fetcher on the dot)."""
    async def body(q):
        lateness = []

        async def handler(m):
            sec, usec = await q.redis.time()
            lateness.append(sec * 1000 + usec // 1000 - round(m.due_at.timestamp() * 1000))
        worker = AsyncWorker(q, {"t": handler}, concurrency=2)
        task = await started(worker)
        for i in range(40):
            await q.publish("t", str(i), delay=0.05 + (i % 8) * 0.03)
            await asyncio.sleep(0.01)
        await until(lambda: _len_is(lateness, 40))
        worker.stop()
        await task
        return sorted(lateness)
    lateness = run(with_queue(engine_url, body))
    assert lateness[0] >= 0, lateness
    assert lateness[int(0.9 * len(lateness))] <= 50, lateness   # generous for a loaded CI machine


async def _len_is(items, n):
    return len(items) >= n


def test_leases_are_extended_while_a_handler_runs(engine_url):
    async def body(q):
        await q.configure_topic("t", visibility_timeout=0.3)
        mid = await q.publish("t", "slow")
        calls = []

        async def handler(m):
            calls.append(m.attempts)
            await asyncio.sleep(1.2)   # four lease lengths
        worker = AsyncWorker(q, {"t": handler}, concurrency=1)
        task = await started(worker)
        await until(lambda: _stat_is(q, "t", "acked", 1))
        worker.stop()
        await task
        assert calls == [1]                                   # never redelivered meanwhile
        assert await q.get("t", mid) is None
    run(with_queue(engine_url, body))


async def _stat_is(q, topic, name, n):
    return (await q.stats(topic)).get(name, 0) >= n


def test_stop_gives_back_prefetched_messages_and_waits_for_started_ones(engine_url):
    async def body(q):
        await q.publish_many("t", [str(i) for i in range(20)])
        gate = asyncio.Event()
        started_ids = []

        async def handler(m):
            started_ids.append(m.id)
            await gate.wait()
        worker = AsyncWorker(q, {"t": handler}, concurrency=2, prefetch=10, grace=10)
        task = await started(worker)
        await until(lambda: _len_is(started_ids, 2))
        await until(lambda: _counts_are(q, "t", ready=8, unacked=12))
        worker.stop()
        await asyncio.sleep(0.2)
        assert not task.done()                                 # the two started handlers hold it
        gate.set()
        await task
        # the ten prefetched but unstarted went back at once, attempt not counted; the two finished
        assert await _counts_are(q, "t", ready=18)
        assert (await q.stats("t"))["acked"] == 2
        [first] = await q.claim("t", 1)
        assert first.attempt == 1
    run(with_queue(engine_url, body))


def test_worker_refuses_blocking_handlers_and_the_blocking_client(engine_url):
    async def body(q):
        with pytest.raises(InvalidArgument, match="not an async function"):
            AsyncWorker(q, {"t": lambda m: None})
        sync_q = DelayQueue.from_url(engine_url)
        try:
            async def handler(m):
                pass
            with pytest.raises(InvalidArgument, match="needs an AsyncDelayQueue"):
                AsyncWorker(sync_q, {"t": handler})
        finally:
            sync_q.redis.close()
    run(with_queue(engine_url, body))


def test_cli_runs_async_handlers_and_sigterm_lets_them_finish(engine_url):
    """`delayq worker --handler module:async_fn`: an AsyncWorker; SIGTERM mid-handler, it finishes
    and acks, and the process exits 0."""
    dq = DelayQueue.from_url(engine_url)
    try:
        mid = dq.publish("jobs", "x")
        proc = start_worker(engine_url, "async_slow_ack")
        stop_after(proc, lambda: dq.redis.llen("test:started") == 1)
        assert [x.decode() for x in dq.redis.lrange("test:handled", 0, -1)] == [f"{mid}:1"]
        assert_counts(dq, "jobs")
        err = proc.stderr.read()
        assert "async worker" in err and "SIGTERM received" in err
    finally:
        dq.redis.close()


def test_batch_handlers_get_lists_and_name_their_failures(engine_url):
    """batch=N: lists of up to N messages of one claim; returning {id: exception} nacks those
    (a Reject dead-letters), the rest are acked; raising fails the whole list."""
    async def body(q):
        await q.configure_topic("t", retry=RetryPolicy.fixed(3600, max_attempts=3))
        await q.configure_topic("u", retry=RetryPolicy.fixed(3600, max_attempts=3))
        ids = await q.publish_many("t", [str(i) for i in range(25)])
        doomed = await q.publish_many("u", ["x", "y"])
        sizes = []

        async def handle_t(messages):
            sizes.append(len(messages))
            return {m.id: (Reject("bad") if m.text() == "3" else ValueError("odd")) for m in messages
                    if int(m.text()) % 2}

        async def handle_u(messages):
            raise RuntimeError("all of them")
        worker = AsyncWorker(q, {"t": handle_t, "u": handle_u}, batch=10, concurrency=2)
        task = await started(worker)
        await until(lambda: _counts_are(q, "t", retrying=11, dead=1))
        await until(lambda: _counts_are(q, "u", retrying=2))
        worker.stop()
        await task
        assert sum(sizes) == 25 and max(sizes) <= 10
        assert (await q.stats("t"))["acked"] == 13
        assert (await q.get("t", ids[3])).state is MessageState.dead
        assert (await q.get("t", ids[5])).last_error.message == "odd"
        assert {(await q.get("u", i)).last_error.message for i in doomed} == {"all of them"}
        with pytest.raises(InvalidArgument, match="batch must be between"):
            AsyncWorker(q, {"t": handle_t}, batch=0)
    run(with_queue(engine_url, body))


def test_running_async_worker_reports_its_details_and_leaves_at_stop(engine_url):
    """The Workers page's row for an AsyncWorker: runtime asyncio, its in-flight message counted;
    gone once stopped."""
    async def body(q):
        release = asyncio.Event()
        await q.publish("t", "held")

        async def handler(m):
            await release.wait()
        worker = AsyncWorker(q, {"t": handler}, concurrency=2, name="w-async")
        task = await started(worker)
        found = []

        async def busy():
            found[:] = (await q.live_workers([("t", "default")])).workers
            return bool(found) and found[0].in_flight == 1
        await until(busy, timeout=15)
        release.set()
        worker.stop()
        await task
        [info] = found
        assert (info.id, info.topics, info.runtime, info.concurrency, info.pid) == (
            "w-async", ("t",), "asyncio", 2, os.getpid())
        assert info.host and info.version and info.started_ms == worker.started_ms
        assert (await q.live_workers([("t", "default")])).workers == []
    run(with_queue(engine_url, body))


def test_finding_an_async_worker_returns_after_stops_wake_up_of_its_fetchers(engine_url):
    """stop() wakes the fetchers in a task of its own; run() returns after it ended, so the caller
    may close the client at once (the blocking worker's finding, here too)."""
    async def body(q):
        async def handler(m):
            pass
        worker = AsyncWorker(q, {"t": handler}, idle_wait=30)
        task = await started(worker)
        worker.stop()
        await task
        assert worker._stop_waking is not None and worker._stop_waking.done()
    run(with_queue(engine_url, body))
