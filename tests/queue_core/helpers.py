from queue_core import DelayQueue, MessageState


def counts(q: DelayQueue, topic: str) -> dict[str, int]:
    return {s.value: n for s, n in q.counts(topic).items()}


def assert_counts(q: DelayQueue, topic: str, **expected: int) -> None:
    """Assert every state's count; states not named must be empty."""
    want = {s.value: expected.get(s.value, 0) for s in MessageState}
    assert counts(q, topic) == want


def server_ms(q: DelayQueue) -> int:
    sec, usec = q.redis.time()
    return sec * 1000 + usec // 1000


def events(q: DelayQueue, topic: str) -> list[dict[str, str]]:
    rows = q.redis.xrange(q.keys(topic).events)
    return [{k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()} for _, fields in rows]


def data_keys_empty(q: DelayQueue, topic: str) -> bool:
    """No message data left behind: metadata, payloads, tracebacks and dedup keys all gone."""
    k = q.keys(topic)
    return all(q.redis.hlen(key) == 0 for key in (k.meta, k.payloads, k.tracebacks, k.dedup))


def poll(fn, timeout: float = 5.0, interval: float = 0.005):
    """Call fn until it returns something truthy; fail after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
