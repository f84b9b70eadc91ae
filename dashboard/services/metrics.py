"""Prometheus metrics of every topic and consumer group, built on prometheus_client.

All figures come from Redis (the engine's own counters), so every dashboard process reports the
same numbers and a restart loses nothing. A render reads the topic registry, the layouts and then
every group in one pipelined round trip (``DelayQueue.snapshot``).

With many topics a render is expensive (1,000 topics x 3 groups: ~1 s of pipeline and
formatting), so with DELAYQ_METRICS_REFRESH the delayq.refresh_metrics beat task renders into one
Redis key and scrapes serve that copy while it is younger than twice the interval, adding
``delayq_metrics_age_seconds``. Without a fresh copy (no beat running) a scrape renders itself.
"""

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from queue_core.keys import metrics_snapshot_key

from .contracts import MessageState
from .engine import get_queue

LABELS = ["topic", "group"]
THROTTLED = "throttled:"


class QueueCollector:
    """Collects at scrape time: nothing is held between scrapes."""

    def collect(self):
        q = get_queue()
        topics = q.topics()
        layouts = q.layouts(topics, fresh=True)   # a scrape every ~15 s: the 2 s cache is always stale
        now_ms, snap = q.snapshot([(t, g) for t in topics for g in layouts[t].groups])
        messages = GaugeMetricFamily("delayq_messages", "Messages of a consumer group by state",
                                     labels=[*LABELS, "state"])
        oldest = GaugeMetricFamily("delayq_oldest_ready_age_seconds",
                                   "Age of the oldest ready message (how long it has been due; 0 when none)",
                                   labels=LABELS)
        events = CounterMetricFamily("delayq_events", "Messages that went through an event since the group was "
                                     "created: published, claimed, acked, nacked, dead (dead-letter inflow), "
                                     "replayed, ...", labels=[*LABELS, "event"])
        throttled = CounterMetricFamily("delayq_throttled", "Claims a dispatch limit cut short since the group was "
                                        "created, by the limit: rate, max_in_flight, key_rate, key_in_flight",
                                        labels=[*LABELS, "reason"])
        workers = GaugeMetricFamily("delayq_workers", "Workers with a heartbeat in the last 30 s", labels=LABELS)
        paused = GaugeMetricFamily("delayq_paused", "1 while the group is paused", labels=LABELS)
        for (topic, group), s in sorted(snap.items()):
            for state in MessageState:
                messages.add_metric([topic, group, state.value], s["counts"][state])
            due = s["oldest_ready_ms"]
            oldest.add_metric([topic, group], max(0.0, (now_ms - due) / 1000) if due is not None else 0.0)
            for event, n in sorted(s["stats"].items()):
                # The stats hash's "throttled:<reason>" counters (dispatch.lua) are a metric of their own.
                reason = event.removeprefix(THROTTLED)
                if reason != event:
                    throttled.add_metric([topic, group, reason], n)
                else:
                    events.add_metric([topic, group, event], n)
            workers.add_metric([topic, group], s["workers"])
            paused.add_metric([topic, group], 1 if s["paused"] else 0)
        yield from (messages, oldest, events, throttled, workers, paused)


def render() -> bytes:
    """The text exposition format, read from Redis now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return generate_latest(registry)


def refresh(interval: float) -> int:
    """Render and store the copy scrapes serve (kept 3 intervals at most); its size in bytes."""
    q = get_queue()
    body = render()
    now_ms = q.server_ms()
    pipe = q.redis.pipeline(transaction=True)
    key = metrics_snapshot_key(q.prefix)
    pipe.hset(key, mapping={"at": now_ms, "body": body})
    pipe.pexpire(key, max(1000, int(interval * 3000)))
    pipe.execute()
    return len(body)


def exposition(refresh_interval: float = 0.0) -> bytes:
    """One scrape: the stored copy while younger than twice ``refresh_interval`` (and an age
    gauge), else a render now."""
    if refresh_interval:
        q = get_queue()
        pipe = q.redis.pipeline(transaction=False)
        pipe.hmget(metrics_snapshot_key(q.prefix), ["at", "body"])
        pipe.time()
        (at, body), (sec, usec) = pipe.execute()
        if at is not None and body is not None:
            age = (int(sec) * 1000 + int(usec) // 1000 - int(at)) / 1000
            if age <= 2 * refresh_interval:
                return body + _age_exposition(max(0.0, age))
    return render()


def _age_exposition(age: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    Gauge("delayq_metrics_age_seconds", "How old the figures of this scrape are (rendered in the background by the "
          "delayq.refresh_metrics task)", registry=registry).set(age)
    return generate_latest(registry)
