"""rq: enqueue_in (pipelined in 1,000s); a WorkerPool of CONCURRENCY processes (rq runs one job
at a time per process) with the scheduler on."""

import sys
from datetime import timedelta

import common
from redis import Redis
from rq import Queue


def publish_bulk(url, delays):
    conn = Redis.from_url(url)
    q = Queue("bench", connection=conn)
    for i in range(0, len(delays), 1000):
        with conn.pipeline() as pipe:
            for d in delays[i:i + 1000]:
                q.enqueue_in(timedelta(seconds=d), common.record, common.due_ms(d), pipeline=pipe, result_ttl=0)
            pipe.execute()


def publish_one(url):
    q = Queue("bench", connection=Redis.from_url(url))
    return lambda due, d: q.enqueue_in(timedelta(seconds=d), common.record, due, result_ttl=0)


def worker(url, concurrency):
    from rq.worker_pool import WorkerPool

    WorkerPool(["bench"], connection=Redis.from_url(url), num_workers=concurrency).start(logging_level="WARNING")


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
