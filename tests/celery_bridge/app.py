"""A Celery app with delayq scheduling its delayed tasks (the bridge tests run workers of it)."""

import os
import time

import redis
from celery import Celery

from queue_core.celery_bridge import DelayqScheduling

app = Celery("bridge", broker=os.environ.get("BRIDGE_BROKER_URL", "redis://127.0.0.1:6379/1"))
app.conf.update(broker_transport_options={"visibility_timeout": 5}, task_acks_late=False,
                worker_prefetch_multiplier=4, broker_connection_retry_on_startup=True)
DelayqScheduling(app, url=os.environ.get("BRIDGE_DELAYQ_URL", "redis://127.0.0.1:6379/0"), min_delay=0.5,
                 signing_key=os.environ.get("BRIDGE_SIGNING_KEYS", "bridge-tests-signing-key-1").split(","))
if os.environ.get("BRIDGE_BEAT_EVERY"):     # a beat_schedule for processes started by the tests (test_beat)
    app.conf.beat_schedule = {"record": {"task": "bridge.record", "args": (7, 0),
                                         "schedule": float(os.environ["BRIDGE_BEAT_EVERY"])}}
_results = redis.Redis.from_url(os.environ.get("BRIDGE_DELAYQ_URL", "redis://127.0.0.1:6379/0"))


@app.task(name="bridge.record", ignore_result=True)
def record(n: int, due_ms: int) -> None:
    """Record one execution: which task, when it was due, when it ran (this machine's clock)."""
    _results.rpush("bridge:ran", f"{n}|{due_ms}|{int(time.time() * 1000)}")


@app.task(name="bridge.flaky", bind=True, ignore_result=True, max_retries=2)
def flaky(self, n: int) -> None:
    """Fails twice, retrying through delayq with a countdown, then records."""
    if self.request.retries < 2:
        raise self.retry(countdown=1)
    _results.rpush("bridge:flaky", f"{n}|{self.request.retries}")
