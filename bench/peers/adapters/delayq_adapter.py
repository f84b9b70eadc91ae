"""delayq: publish_many per 10 ms delay slot; Worker with threads."""

import json
import sys
from collections import defaultdict

import common

from queue_core import DelayQueue, Worker

TOPIC = "bench"


def publish_bulk(url, delays):
    q = DelayQueue.from_url(url)
    slots = defaultdict(int)   # publish_many takes one delay per call: delays rounded to 10 ms slots
    for d in delays:
        slots[round(d, 2)] += 1
    for d, count in sorted(slots.items()):
        due = common.due_ms(d)
        q.publish_many(TOPIC, [json.dumps({"due_ms": due})] * count, delay=d)


def publish_one(url):
    q = DelayQueue.from_url(url)
    return lambda due_ms, d: q.publish(TOPIC, json.dumps({"due_ms": due_ms}), delay=d)


def handler(message):
    common.record(json.loads(message.payload)["due_ms"])


def worker(url, concurrency):
    Worker(DelayQueue.from_url(url), {TOPIC: handler}, concurrency=concurrency).run()


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
