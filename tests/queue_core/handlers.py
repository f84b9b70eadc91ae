"""Handlers run by worker processes in the multi-process tests (imported by module path)."""

import os
import time

import redis

_client = None


def _redis():
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["TEST_REDIS_URL"])
    return _client


def record(message):
    """Record (id, attempt) of every delivery and the pid that ran it."""
    _redis().rpush("test:handled", f"{message.id}:{message.attempts}:{os.getpid()}")


def hang_first_attempt(message):
    """Announce the start, then hang on the first attempt: the test SIGKILLs this process mid-handler."""
    r = _redis()
    r.rpush("test:started", f"{message.id}:{message.attempts}:{os.getpid()}")
    if message.attempts == 1:
        time.sleep(600)
    r.rpush("test:handled", f"{message.id}:{message.attempts}:{os.getpid()}")


def slow_ack(message):
    """Announce the start, take a moment of real work (the test sends SIGTERM meanwhile), finish."""
    r = _redis()
    r.rpush("test:started", message.id)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        pass
    r.rpush("test:handled", message.id)


def metrics_mix(message):
    """For the worker-metrics test: 'fail' raises (nack), 'slow' outlives its 0.3 s lease (the
    keeper extends it), anything else acks."""
    text = message.text()
    if text == "fail":
        raise ValueError("asked to fail")
    if text == "slow":
        time.sleep(1.0)
    _redis().rpush("test:handled", message.id)


async def async_slow_ack(message):
    """slow_ack as an async def handler (the CLI runs it in an AsyncWorker): it awaits a second
    of work while the test sends SIGTERM."""
    import asyncio

    r = _redis()
    r.rpush("test:started", message.id)
    await asyncio.sleep(1.0)
    r.rpush("test:handled", f"{message.id}:{message.attempts}")


def record_interval(message):
    """Hold the message 20 ms and record "<payload>|start|end" (ms, this machine's clock): the
    in-flight tests read the overlaps."""
    start = time.time() * 1000
    time.sleep(0.02)
    _redis().rpush("test:intervals", f"{message.text()}|{start:.3f}|{time.time() * 1000:.3f}")


def record_with_work(message):
    """Record the delivery after a few ms of work, so a SIGKILL often lands mid-handler."""
    deadline = time.monotonic() + 0.005
    while time.monotonic() < deadline:
        pass
    _redis().rpush("test:handled", f"{message.id}:{message.attempts}:{message.text()}")
