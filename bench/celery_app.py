"""The Celery app of bench.celery_bridge: BENCH_CELERY_MODE=bridge schedules countdowns in delayq,
=native leaves them to Celery. Every execution is recorded (task, due, start) in Redis."""

import os
import time

import redis
from celery import Celery

MODE = os.environ.get("BENCH_CELERY_MODE", "native")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")
app = Celery("bench", broker=f"{REDIS}/1")
app.conf.update(broker_transport_options={"visibility_timeout": 5}, worker_prefetch_multiplier=4,
                broker_connection_retry_on_startup=True, task_ignore_result=True)
if MODE == "bridge":
    from queue_core.contrib.celery_bridge import DelayqScheduling

    DelayqScheduling(app, url=f"{REDIS}/0", min_delay=0.5, signing_key="bench-celery-bridge-signing-key")
_log = redis.Redis.from_url(f"{REDIS}/2")


@app.task(name="bench.record", bind=True)
def record(self, n: int, due_ms: int) -> None:
    forwarded = getattr(self.request, "delayq_forwarded_ms", None) or 0   # set by the bridge's forwarder
    _log.rpush("ran", f"{n}|{due_ms}|{int(time.time() * 1000)}|{forwarded}")
