"""arq: enqueue_job with _defer_by (100 concurrent enqueues); Worker with max_jobs, defaults otherwise."""

import asyncio
import sys
from datetime import timedelta

import common
from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Worker


async def task(ctx, due_ms):
    common.record(due_ms)


def publish_bulk(url, delays):
    async def go():
        pool = await create_pool(RedisSettings.from_dsn(url))
        for i in range(0, len(delays), 100):
            await asyncio.gather(*(pool.enqueue_job("task", common.due_ms(d), _defer_by=timedelta(seconds=d))
                                   for d in delays[i:i + 100]))
        await pool.aclose()
    asyncio.run(go())


def publish_one(url):
    loop = asyncio.new_event_loop()
    pool = loop.run_until_complete(create_pool(RedisSettings.from_dsn(url)))
    return lambda due, d: loop.run_until_complete(pool.enqueue_job("task", due, _defer_by=timedelta(seconds=d)))


def worker(url, concurrency):
    asyncio.set_event_loop(asyncio.new_event_loop())
    Worker(functions=[task], redis_settings=RedisSettings.from_dsn(url), max_jobs=concurrency,
           keep_result=0).run()


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
