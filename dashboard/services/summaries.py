"""Summaries for the overview and the topic page: counts, throughput, liveness and the paused flag
of each consumer group, cached ~1 s so many open tabs do not multiply Redis load."""

import hashlib
import logging

from queue_core import MessageState

from .. import conf
from .contracts import DEFAULT_GROUP
from .engine import get_queue

log = logging.getLogger("delayq.dashboard")

SUMMARY_TTL = 1.0
STATES = [s.value for s in MessageState]


# -- reading -------------------------------------------------------------------------------------

def topic_summaries(search: str = "", offset: int = 0, limit: int | None = None) -> tuple[list[dict], int]:
    """Topics known to Redis or to the database whose name contains ``search`` (any case), sorted
    by name, ``limit`` of them from ``offset``, each with its groups' cached summaries and the
    totals over them, and how many topics match. Only the listed topics are read, all their
    groups in one pipelined round trip, so 1,000 topics cost what a page of them costs."""
    from ..models import Topic

    q = get_queue()
    managed = {t.name: t for t in Topic.objects.all()}
    names = sorted(set(q.topics()) | set(managed))
    if search:
        needle = search.casefold()
        names = [n for n in names if needle in n.casefold()]
    matching = len(names)
    names = names[offset:offset + limit if limit is not None else None]
    layouts = q.layouts(names)
    summaries = group_summaries([(n, g) for n in names for g in layouts[n].groups], series=True)
    rows = []
    for name in names:
        layout, topic = layouts[name], managed.get(name)
        groups = [{"name": g, **_group_row(summaries[(name, g)])} for g in layout.groups]
        totals = {s: sum(g["summary"]["counts"][s] for g in groups) for s in STATES}
        rows.append({
            "name": name, "groups": groups, "partitions": layout.partitions, "counts": list(totals.items()),
            "total": sum(totals.values()), "managed": topic is not None,
            "sync_error": topic.sync_error if topic else "",
            "per_minute": _topic_minutes(groups),
            "paused_groups": [g["name"] for g in groups if g["summary"]["paused"]],
            "ordered_groups": [g["name"] for g in groups if g["summary"]["ordered"]],
            "idle_groups": [g["name"] for g in groups if g["total"] and not g["summary"]["workers"]],
            **{field: _total(groups, field) for field in ("overdue_pending", "acked_last_minute", "acked_last_hour",
                                                           "dead_last_hour")},
            **{field: _oldest(groups, field) for field in ("oldest_overdue_age_s", "oldest_ready_age_s")},
            # kept for callers of version 1's single group (the JSON API's topic list)
            "paused": bool(groups) and all(g["summary"]["paused"] for g in groups),
        })
    return rows, matching


def _topic_minutes(groups: list[dict]) -> dict[str, list[int]]:
    """A topic's sparkline from its groups': acked and dead summed (each group settles its own
    copies), published the largest (every group counts each publish once)."""
    minutes = [g["summary"]["per_minute"] for g in groups]
    if not minutes:
        return {}
    return {"published": [max(col) for col in zip(*(m["published"] for m in minutes), strict=True)],
            **{e: [sum(col) for col in zip(*(m[e] for m in minutes), strict=True)] for e in ("acked", "dead")}}


def _total(groups: list[dict], field: str) -> int:
    return sum(g["summary"][field] for g in groups)


def _oldest(groups: list[dict], field: str) -> float | None:
    """The largest age among the groups (None when no group has one)."""
    return max((g["summary"][field] for g in groups if g["summary"][field] is not None), default=None)


def _group_row(summary: dict) -> dict:
    return {"summary": summary, "counts": list(summary["counts"].items()), "total": sum(summary["counts"].values())}


def group_summaries(pairs: list[tuple[str, str]], *, series: bool = False) -> dict[tuple[str, str], dict]:
    """{(topic, group): summary} for many groups: cached ones from the cache, the rest in one
    batched engine read, each cached for a second. ``series``: with the last hour's per-minute
    counts (``per_minute``) the overview's sparklines draw, read in the same pipeline."""
    from django.core.cache import cache

    keys = {pair: _cache_key(*pair) + (":series" if series else "") for pair in pairs}
    cached = cache.get_many(list(keys.values()))
    out = {pair: cached[key] for pair, key in keys.items() if key in cached}
    missing = [pair for pair in pairs if pair not in out]
    if missing:
        fresh = {pair: _summary(raw) for pair, raw in get_queue().summaries(missing, series=series).items()}
        cache.set_many({keys[pair]: data for pair, data in fresh.items()}, SUMMARY_TTL)
        out.update(fresh)
    return out


def _summary(raw: dict) -> dict:
    return {**raw, "counts": {s.value: raw["counts"][s] for s in MessageState}}


def topic_summary(name: str, group: str = DEFAULT_GROUP) -> dict:
    """Counts, throughput, worker liveness and the paused flag of one group. Cached for a second."""
    return group_summaries([(name, group)])[(name, group)]


def minute_series(name: str, group: str = DEFAULT_GROUP) -> dict:
    """One group's last hour per minute (the engine's ``minute_series``: published, acked, dead,
    lateness p50/p99) for the topic page's charts. Cached for a second, as summaries are."""
    from django.core.cache import cache

    key = _cache_key(name, group) + ":minutes"
    series = cache.get(key)
    if series is None:
        series = get_queue().minute_series([(name, group)])[(name, group)]
        cache.set(key, series, SUMMARY_TTL)
    return series


def lateness_causes(name: str, group: str = DEFAULT_GROUP) -> dict:
    """One group's late deliveries per minute by cause over the last hour (the engine's
    ``lateness_causes``) for the topic page's stacked chart. Cached for a second, as summaries are."""
    from django.core.cache import cache

    key = _cache_key(name, group) + ":causes"
    causes = cache.get(key)
    if causes is None:
        causes = get_queue().lateness_causes(name, group=group, minutes=60)
        cache.set(key, causes, SUMMARY_TTL)
    return causes


def _cache_key(name: str, group: str) -> str:
    # The URL names the Redis the summary is of; hashed, so its password never reaches the cache.
    server = hashlib.sha256(conf.redis_url().encode()).hexdigest()[:16]
    return f"dq:summary:{server}:{name}:{group}"


def forget_summary(name: str, group: str = DEFAULT_GROUP) -> None:
    """After an action, show its effect at once instead of a second-old cached figure."""
    from django.core.cache import cache

    base = _cache_key(name, group)
    cache.delete_many([base, base + ":series", base + ":minutes"])
