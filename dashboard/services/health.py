"""The measures alert rules watch, read from the engine's own counters in Redis (so every process
sees the same): dead letters in the last hour, the oldest ready message's wait, the time since a
worker's last heartbeat, and the delivery lateness p99 over the last minutes."""

from .engine import get_queue


def measure(topic: str, group: str, kind: str, window_minutes: int = 5) -> float | None:
    """The current value of one alert measure (None when there is nothing to measure: no ready
    message, no delivery in the window). ``kind`` is an AlertRule.Kind value."""
    q = get_queue()
    if kind == "dead_per_hour":
        return float(q.throughput(topic, group=group)["dead_last_hour"])
    if kind == "oldest_ready":
        return q.throughput(topic, group=group)["oldest_ready_age_s"]
    if kind == "no_workers":
        age = q.last_heartbeat_age(topic, group=group)
        # Never a heartbeat (or the last worker signed off): as long as can be.
        return float("inf") if age is None else age
    if kind == "lateness_p99":
        p99 = q.lateness(topic, group=group, minutes=window_minutes)["p99_ms"]
        return None if p99 is None else p99 / 1000
    raise ValueError(f"no measure {kind!r}")
