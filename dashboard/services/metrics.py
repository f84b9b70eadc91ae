"""Prometheus metrics of every topic and consumer group, built on prometheus_client.

All figures come from Redis (the engine's own counters), so every dashboard process reports the
same numbers and a restart loses nothing. One scrape reads the topic registry, the layouts (cached
2 s) and then every group in one pipelined round trip (``DelayQueue.snapshot``).
"""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .contracts import MessageState
from .engine import get_queue

LABELS = ["topic", "group"]


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
        workers = GaugeMetricFamily("delayq_workers", "Workers with a heartbeat in the last 30 s", labels=LABELS)
        paused = GaugeMetricFamily("delayq_paused", "1 while the group is paused", labels=LABELS)
        for (topic, group), s in sorted(snap.items()):
            for state in MessageState:
                messages.add_metric([topic, group, state.value], s["counts"][state])
            due = s["oldest_ready_ms"]
            oldest.add_metric([topic, group], max(0.0, (now_ms - due) / 1000) if due is not None else 0.0)
            for event, n in sorted(s["stats"].items()):
                events.add_metric([topic, group, event], n)
            workers.add_metric([topic, group], s["workers"])
            paused.add_metric([topic, group], 1 if s["paused"] else 0)
        yield from (messages, oldest, events, workers, paused)


def exposition() -> bytes:
    """The text exposition format of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    return generate_latest(registry)
