"""Topic summaries for the overview and the topic page: counts, throughput, liveness, cached ~1 s."""

import logging

from queue_core import MessageState

from .. import conf
from .engine import get_queue

log = logging.getLogger("delayq.dashboard")


# -- reading -------------------------------------------------------------------------------------

def topic_summaries(search: str = "", offset: int = 0, limit: int | None = None) -> tuple[list[dict], int]:
    """Topics known to Redis or to the database whose name contains ``search`` (any case), sorted
    by name, ``limit`` of them from ``offset``, with their cached summaries (counts, throughput,
    workers), and how many topics match. Only the listed topics cost round trips (a few each,
    cached for a second however many tabs poll), so 1,000 topics cost what a page of them costs."""
    from ..models import Topic

    q = get_queue()
    managed = {t.name: t for t in Topic.objects.all()}
    names = sorted(set(q.topics()) | set(managed))
    if search:
        needle = search.casefold()
        names = [n for n in names if needle in n.casefold()]
    matching = len(names)
    names = names[offset:offset + limit if limit is not None else None]
    rows = []
    for name in names:
        summary = topic_summary(name)
        topic = managed.get(name)
        rows.append({"name": name, "counts": list(summary["counts"].items()), "summary": summary,
                     "total": sum(summary["counts"].values()), "managed": topic is not None,
                     "paused": topic.paused if topic else summary["paused"],
                     "sync_error": topic.sync_error if topic else ""})
    return rows, matching


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
