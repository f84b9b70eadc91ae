"""Handlers for the chaos tests' worker processes."""

import random


def flaky(message) -> None:
    """Fails one time in five: the retry policy and the dead-letter queue get real work."""
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
