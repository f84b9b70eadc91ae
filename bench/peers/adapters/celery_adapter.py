"""Celery: apply_async(countdown=...) on the Redis broker; one worker process, threads pool."""

import sys

import common
from celery import Celery

app = Celery("bench")


@app.task(name="record", ignore_result=True)
def record(due_ms):
    common.record(due_ms)


def _configure(url):
    app.conf.broker_url = url
    app.conf.task_ignore_result = True


def publish_bulk(url, delays):
    _configure(url)
    with app.producer_or_acquire() as producer:
        for d in delays:
            record.apply_async((common.due_ms(d),), countdown=d, producer=producer)


def publish_one(url):
    _configure(url)
    return lambda due, d: record.apply_async((due,), countdown=d)


def worker(url, concurrency):
    _configure(url)
    app.worker_main(["worker", "--pool", "threads", "--concurrency", str(concurrency), "--loglevel", "WARNING",
                     "--without-gossip", "--without-mingle", "--without-heartbeat"])


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
