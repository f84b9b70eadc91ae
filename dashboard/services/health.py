"""The measures alert rules watch, read from the engine's own counters in Redis (so every process
sees the same): dead letters in the last hour, the oldest ready message's wait, the time since a
worker's last heartbeat, the delivery lateness p99 over the last minutes, and the ticks the
topic's schedules missed in the last hour."""

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
    if kind == "schedule_missed":
        return float(missed_ticks(topic))
    if kind == "time_to_full":   # the topic's, whatever the group: the sooner of Redis full and the budget's
        m = q.memory(topic)
        times = [t for t in (m.time_to_full, m.time_to_budget) if t is not None]
        return min(times) if times else None
    raise ValueError(f"no measure {kind!r}")


def missed_ticks(topic: str, within_ms: int = 3_600_000) -> int:
    """Ticks of ``topic``'s schedules missed (older than their catch-up window when a scheduler got
    to them) in the last ``within_ms``, from each schedule's last 20 ticks (a long outage is one
    line counting all its ticks). The registry (names only), then the topic's schedules in one
    pipelined round trip."""
    q = get_queue()
    since = q.server_ms() - within_ms
    names = [n for n, (t, _p) in q.schedule_index().items() if t == topic]
    return sum(t.count for s in q.schedules(names=names) for t in s.ticks
               if t.outcome == "missed" and t.tick_ms >= since)
