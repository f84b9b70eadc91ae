"""Topic summaries for the overview and the topic page: counts, throughput, liveness, cached ~1 s."""

import logging

from queue_core import MessageState

from .. import conf
from .engine import get_queue

log = logging.getLogger("delayq.dashboard")


# -- reading -------------------------------------------------------------------------------------

def topic_summaries() -> list[dict]:
    """Every topic known to Redis or to the database, with its cached summary (counts, throughput,
    workers): at most two round trips per topic per second, however many tabs poll."""
    from ..models import Topic

    q = get_queue()
    managed = {t.name: t for t in Topic.objects.all()}
    names = sorted(set(q.topics()) | set(managed))
    rows = []
    for name in names:
        summary = topic_summary(name)
        topic = managed.get(name)
        rows.append({"name": name, "counts": list(summary["counts"].items()), "summary": summary,
                     "total": sum(summary["counts"].values()), "managed": topic is not None,
                     "paused": topic.paused if topic else summary["paused"],
                     "sync_error": topic.sync_error if topic else ""})
    return rows


# -- summaries (cached ~1 s so many open tabs do not multiply Redis load) ---------------------------

SUMMARY_TTL = 1.0


def topic_summary(name: str) -> dict:
    """Counts, throughput, worker liveness and the paused flag of one topic. Three round trips,
    cached for a second."""
    from django.core.cache import cache

    key = f"dq:summary:{conf.redis_url()}:{name}"
    data = cache.get(key)
    if data is None:
        q = get_queue()
        counts = q.counts(name)
        data = {"counts": {s.value: counts[s] for s in MessageState}, **q.throughput(name),
                "paused": q.topic_config(name).paused}
        cache.set(key, data, SUMMARY_TTL)
    return data


def forget_summary(name: str) -> None:
    """After an action, show its effect at once instead of a second-old cached figure."""
    from django.core.cache import cache

    cache.delete(f"dq:summary:{conf.redis_url()}:{name}")
