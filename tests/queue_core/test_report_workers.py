"""message.progress() and message.log() through both workers: visible through journal() within
about a second while the handler still runs, the last lines kept with a failed message, and no
report call at all from handlers that never use them. (The engine side: test_report.py.)"""

import asyncio
import threading
import time

from queue_core import AsyncDelayQueue, AsyncWorker, DelayQueue, MessageState, RetryPolicy, Worker
from tests.conftest import run_async

from .helpers import poll, running

SHOWN_WITHIN = 1.0   # seconds from the handler's call to journal() showing it


class CountingQueue(DelayQueue):
    """Counts the worker's report calls (the real ones run)."""

    reports = 0

    def report(self, deliveries):
        self.reports += 1
        return super().report(deliveries)


def test_thread_worker_reports_while_the_handler_runs_and_before_its_nack(engine_url):
    q = CountingQueue.from_url(engine_url, actor="test")
    q.configure_topic("t", visibility_timeout=30, retry=RetryPolicy.fixed(3600))
    called, release = {}, threading.Event()

    def handler(m):
        m.log("loaded 3 files")
        m.progress(0.42, "step 3/7")
        called["at"] = time.monotonic()
        release.wait(10)
        m.log("step 4 failed: disk full")
        raise OSError("disk full")
    mid = q.publish("t", "job")
    with running(Worker(q, {"t": handler}, concurrency=1)):
        poll(lambda: "at" in called)
        poll(lambda: q.journal("t", mid).progress == 0.42, timeout=5, interval=0.01)
        shown = time.monotonic() - called["at"]
        release.set()
        poll(lambda: q.get("t", mid).state is MessageState.retrying)
    print(f"thread worker: progress shown {shown * 1000:.0f} ms after the call")
    assert shown < SHOWN_WITHIN
    j = q.journal("t", mid)
    assert (j.progress, j.note) == (0.42, "step 3/7")
    assert [line.text for line in j.lines] == ["loaded 3 files", "step 4 failed: disk full"]
    assert q.reports >= 2   # while it ran, and before the nack: the spy counts real calls


def test_async_worker_reports_while_the_handler_runs(engine_url):
    async def body():
        async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
            await q.configure_topic("t", visibility_timeout=30)
            called, release = {}, asyncio.Event()

            async def handler(m):
                m.progress(0.5, "half")
                m.log("halfway")
                called["at"] = time.monotonic()
                await release.wait()
            mid = await q.publish("t", "job")
            worker = AsyncWorker(q, {"t": handler}, concurrency=1)
            task = asyncio.get_running_loop().create_task(worker.run(install_signal_handlers=False))
            deadline = time.monotonic() + 10
            while (await q.journal("t", mid)).progress != 0.5 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            shown = time.monotonic() - called["at"]
            j = await q.journal("t", mid)
            release.set()
            while await q.get("t", mid) is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            worker.stop()
            await task
            return shown, j, await q.journal("t", mid)
    shown, j, after = run_async(body(), 30)
    print(f"asyncio worker: progress shown {shown * 1000:.0f} ms after the call")
    assert shown < SHOWN_WITHIN and j.note == "half" and [line.text for line in j.lines] == ["halfway"]
    assert after.empty   # acked: the journal went with the message


def test_handlers_that_never_report_cost_no_report_call(engine_url):
    """The hot path: 2,000 messages through a worker, slow enough to be checked for cancels,
    and not one report call or journal key."""
    q = CountingQueue.from_url(engine_url, actor="test")
    q.publish_many("t", [str(i) for i in range(2000)])
    slow = {"0", "1"}

    def handler(m):
        if m.text() in slow:
            time.sleep(0.8)   # long enough for the keeper's running checks
    with running(Worker(q, {"t": handler}, concurrency=4)):
        poll(lambda: sum(q.counts("t").values()) == 0, timeout=30)
    assert q.reports == 0 and not q.redis.exists(q.keys("t").journal)
    assert q.stats("t")["acked"] == 2000


def test_finding_a_lone_surrogate_in_a_log_line_does_not_stop_the_worker(engine_url):
    """A review found a handler logging text with a lone surrogate (valid JSON "\\udcff" in a
    payload) killed the keeper: redis-py could not encode the report. The text is sent escaped,
    and a report that fails for any reason drops its lines with a warning, never the worker."""
    q = DelayQueue.from_url(engine_url, actor="test")
    q.configure_topic("t", visibility_timeout=30)
    seen = []

    def handler(m):
        name = m.json()["name"]
        m.log(f"customer {name}")
        m.progress(0.5, name)
        time.sleep(0.7)                 # long enough for the keeper to send the report
        seen.append(name)
    mid = q.publish("t", '{"name": "\\udcff"}')
    worker = Worker(q, {"t": handler}, concurrency=1)
    with running(worker):
        poll(lambda: q.get("t", mid) is None, 10)              # acked
        q.publish("t", '{"name": "next"}')
        poll(lambda: "next" in seen, 10)                        # the next one handled
    assert worker.failed == 0 and seen[0] == "\udcff"
