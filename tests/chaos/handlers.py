"""Handlers for the chaos tests' worker processes."""

import random
import time


def flaky(message) -> None:
    """Takes 5 ms and fails one time in five: the retry policy and the dead-letter queue get real
    work, and each group's 20,000 messages take its two workers (4 threads each) about 12 s, so
    the chaos schedule's kills (one a second for 15 s) and Redis restart land on work in flight.
    Without the 5 ms a group could drain in a second, before the first kill of its workers."""
    time.sleep(0.005)
    if random.random() < 0.2:
        raise RuntimeError("random failure")


def hang_first_attempt(message) -> None:
    """Attempt 1 hangs until the test releases it (then returns, so its worker tries a late ack)."""
    import os

    import redis

    r = redis.Redis.from_url(os.environ["TEST_REDIS_URL"])
    r.rpush("chaos:started", f"{message.attempts}:{os.getpid()}")
    if message.attempts == 1:
        r.blpop(["chaos:release"], timeout=60)
    r.rpush("chaos:finished", f"{message.attempts}:{os.getpid()}")


def flaky10(message) -> None:
    """Fails one time in ten (the soak test's steady failure rate)."""
    if random.random() < 0.1:
        raise RuntimeError("soak failure")
