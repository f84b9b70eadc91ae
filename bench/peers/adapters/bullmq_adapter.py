"""BullMQ (Python port): addBulk with per-job delay; Worker with async concurrency."""

import asyncio
import signal
import sys

import common
from bullmq import Queue, Worker

NAME = "bench"


def publish_bulk(url, delays):
    async def go():
        q = Queue(NAME, {"connection": url})
        for i in range(0, len(delays), 1000):
            await q.addBulk([{"name": "j", "data": {"due_ms": common.due_ms(d)}, "opts": {"delay": int(d * 1000)}}
                             for d in delays[i:i + 1000]])
        await q.close()
    asyncio.run(go())


def publish_one(url):
    loop = asyncio.new_event_loop()
    q = Queue(NAME, {"connection": url})
    return lambda due, d: loop.run_until_complete(q.add("j", {"due_ms": due}, {"delay": int(d * 1000)}))


def worker(url, concurrency):
    async def process(job, token):
        common.record(job.data["due_ms"])

    async def go():
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        w = Worker(NAME, process, {"connection": url, "concurrency": concurrency})
        await stop.wait()
        await w.close()
    asyncio.run(go())


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
