"""The dashboard's only door to the engine: every view and task reaches Redis through here."""

from functools import lru_cache

from django.conf import settings

from queue_core import DelayQueue, MessageState


@lru_cache(maxsize=4)
def _queue(url: str, prefix: str) -> DelayQueue:
    return DelayQueue.from_url(url, prefix=prefix, actor="dashboard", socket_timeout=5, socket_connect_timeout=2)


def get_queue() -> DelayQueue:
    """One DelayQueue (and connection pool) per Redis URL, shared by the process."""
    return _queue(settings.DELAYQ_REDIS_URL, getattr(settings, "DELAYQ_PREFIX", "dq"))


def topic_summaries() -> list[dict]:
    """Counts per state for every topic; one round trip per topic."""
    q = get_queue()
    rows = []
    for topic in q.topics():
        counts = q.counts(topic)
        rows.append({"name": topic, "counts": [(s.value, counts[s]) for s in MessageState],
                     "total": sum(counts.values())})
    return rows
