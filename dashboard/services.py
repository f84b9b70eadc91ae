"""The dashboard's only door to Redis: every view, admin action, command and task goes through here.

Sync: a saved Topic (or RetryPolicy) is written to the engine's config hash after the transaction
commits. configure_topic() writes the whole config atomically (MULTI), so a Redis outage leaves the
old config in place, never half of the new one; the failure is recorded on the Topic
(``sync_error``) and the next save, admin "sync" action or ``manage.py dq_sync_topics`` repairs it.
"""

import logging
from dataclasses import dataclass, fields
from functools import lru_cache

import redis
from django.db import transaction
from django.utils import timezone
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from queue_core import DelayQueue, MessageState, TopicConfig

from . import conf

log = logging.getLogger("delayq.dashboard")


@lru_cache(maxsize=4)
def _queue(url: str, prefix: str) -> DelayQueue:
    # One short retry only: a dashboard request must fail fast and say so when Redis is down.
    return DelayQueue.from_url(url, prefix=prefix, actor="dashboard", socket_timeout=5, socket_connect_timeout=2,
                               retry=Retry(ExponentialBackoff(cap=0.2), 1))


def get_queue() -> DelayQueue:
    """One DelayQueue (and connection pool) per Redis URL, shared by the process."""
    return _queue(conf.redis_url(), conf.prefix())


# -- reading -------------------------------------------------------------------------------------

def topic_summaries() -> list[dict]:
    """Every topic known to Redis or to the database, with its cached summary (counts, throughput,
    workers): at most two round trips per topic per second, however many tabs poll."""
    from .models import Topic

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


# -- sync ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Drift:
    topic: str
    differences: dict[str, tuple[object, object]]   # field -> (in Redis, in the database)
    missing: bool                                    # no config in Redis at all

    @property
    def in_sync(self) -> bool:
        return not self.missing and not self.differences

    def describe(self) -> str:
        if self.missing:
            return "not configured in Redis"
        if not self.differences:
            return "in sync"
        return "; ".join(f"{k}: Redis has {a!r}, database has {b!r}" for k, (a, b) in self.differences.items())


def drift(topic) -> Drift:
    """Compare the engine's config in Redis with the Topic row. One round trip."""
    q = get_queue()
    want = topic.engine_config()
    if not q.is_configured(topic.name):
        return Drift(topic.name, {}, True)
    have = q.topic_config(topic.name)
    diffs = {f.name: (getattr(have, f.name), getattr(want, f.name)) for f in fields(TopicConfig)
             if getattr(have, f.name) != getattr(want, f.name)}
    return Drift(topic.name, diffs, False)


def sync_topic(topic) -> str | None:
    """Write one topic's config to Redis; record the outcome on the row. Returns the error or None."""
    from .models import Topic

    try:
        get_queue().configure_topic(topic.name, topic.engine_config())
    except redis.RedisError as exc:
        error = (f"Could not write the configuration to Redis ({exc}). The previous configuration stays in "
                 "force; it will be written by the next save, the admin 'sync' action or "
                 "'manage.py dq_sync_topics'.")
        Topic.objects.filter(pk=topic.pk).update(sync_error=error)
        log.warning("sync of topic %s failed: %s", topic.name, exc)
        return error
    Topic.objects.filter(pk=topic.pk).update(sync_error="", synced_at=timezone.now())
    return None


def sync_after_commit(topic_ids) -> None:
    """Schedule a sync of these topics once the current transaction commits (or now, outside one)."""
    from .models import Topic

    ids = list(topic_ids)

    def run():
        for topic in Topic.objects.filter(pk__in=ids).select_related("retry_policy"):
            sync_topic(topic)
    transaction.on_commit(run)


def unmanaged_topics() -> list[str]:
    """Topics Redis knows that have no Topic row."""
    from .models import Topic

    known = set(Topic.objects.values_list("name", flat=True))
    return [t for t in get_queue().topics() if t not in known]


def adopt(name: str):
    """Create a Topic (and, if no identical one exists, a RetryPolicy) from the engine's config."""
    from .models import RetryPolicy, Topic

    cfg = get_queue().topic_config(name)
    p = cfg.retry
    fields_ = dict(kind=p.kind, base_delay=p.base, factor=p.factor, max_delay=p.max_delay,
                   schedule=list(p.schedule), jitter=p.jitter, max_attempts=p.max_attempts)
    with transaction.atomic():
        policy = RetryPolicy.objects.filter(**fields_).first()
        if policy is None:
            policy = RetryPolicy.objects.create(name=f"{name} (adopted)", **fields_,
                                                description=f"Created when topic {name} was adopted.")
        topic = Topic.objects.create(
            name=name, retry_policy=policy, visibility_timeout=cfg.visibility_timeout,
            max_payload_bytes=cfg.max_payload_bytes, dead_max_count=cfg.dead_max_count,
            dead_max_age=cfg.dead_max_age, events=cfg.events, paused=cfg.paused,
            description="Adopted from Redis.")
    return topic


def set_paused(topic_name: str, paused: bool) -> None:
    """Pause or resume; managed topics through their row (synced), unmanaged ones directly."""
    from .models import Topic

    topic = Topic.objects.filter(name=topic_name).first()
    if topic is not None:
        topic.paused = paused
        topic.save(update_fields=["paused", "updated"])  # post_save syncs after commit
    elif paused:
        get_queue().pause(topic_name)
    else:
        get_queue().resume(topic_name)


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


# -- messages --------------------------------------------------------------------------------------

def message_page(topic: str, state: MessageState, *, after: str | None, search: str = "",
                 since_ms: int | None = None, until_ms: int | None = None, fingerprint: str = "", limit: int = 50):
    """One page of a state's messages. Search finds one message by id or key; the time range and
    the error group filter the page (the range starts the cursor, so deep ranges stay cheap)."""
    q = get_queue()
    if search:
        msg = q.get(topic, search)
        if msg is None:
            by_key = q.find_by_key(topic, search)
            msg = q.get(topic, by_key) if by_key else None
        return ([msg] if msg and msg.state == state else []), None
    if fingerprint and state is MessageState.dead and since_ms is None and until_ms is None:
        page = q.group_page(topic, fingerprint, limit=limit, after=after)  # the group's own index
        return page.messages, page.next_cursor
    if since_ms is not None and not after:
        after = f"{since_ms - 1}/~"   # '~' sorts after every id: start at since_ms
    messages, cursor = [], after
    # Filters can thin a page out; walk on (bounded) until the page is full or the range ends.
    for _ in range(10):
        page = q.page(topic, state, limit=limit, after=cursor)
        for m in page.messages:
            score = score_ms(m, state)
            if until_ms is not None and score is not None and score > until_ms:
                return messages, None
            if fingerprint and (not m.last_error or m.last_error.fingerprint != fingerprint):
                continue
            messages.append(m)
            if len(messages) == limit:
                return messages, f"{score}/{m.id}"
        cursor = page.next_cursor
        if not cursor:
            return messages, None
    return messages, cursor


def score_ms(message, state: MessageState) -> int | None:
    """The message's position in its state, in epoch ms: due time, lease deadline or time of death."""
    at = {MessageState.pending: message.due_at, MessageState.ready: message.due_at,
          MessageState.retrying: message.due_at, MessageState.unacked: message.lease_deadline,
          MessageState.dead: message.dead_at}[state]
    return round(at.timestamp() * 1000) if at else None


def redaction_rules(topic: str) -> list[str]:
    from .models import Topic

    rules = Topic.objects.filter(name=topic).values_list("redaction_rules", flat=True).first()
    return list(rules or [])


def next_attempt_preview(policy, message) -> str:
    """What happens if this message fails again, by the topic's retry policy."""
    from queue_core.retry import format_seconds

    limit = message.max_attempts or policy.max_attempts
    if message.attempts >= limit:
        return f"dead on the next failure (attempt {message.attempts} of {limit})"
    delay = policy.delay_ms(max(message.attempts, 1)) / 1000
    jitter = f" ± {policy.jitter:.0%}" if policy.jitter else ""
    return f"retry {format_seconds(delay)}{jitter} after the next failure (attempt {message.attempts} of {limit})"


# -- bulk replay -----------------------------------------------------------------------------------

def replay_scope_words(topic: str, scope: dict) -> str:
    parts = [f"dead letters of {topic}"]
    if scope.get("fingerprint"):
        parts.append(f"in error group {scope['fingerprint']}")
    if scope.get("since_ms"):
        parts.append(f"dead since {_fmt_ms(scope['since_ms'])}")
    parts.append(f"dead by {_fmt_ms(scope['cutoff_ms'])}")
    return ", ".join(parts)


def _fmt_ms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def replay_preview(topic: str, fingerprint: str = "", since_ms: int | None = None,
                   until_ms: int | None = None) -> dict:
    """Count and five samples of what "replay all matching" would take, and the frozen scope."""
    q = get_queue()
    cutoff = min(until_ms, q.server_ms()) if until_ms else q.server_ms()
    scope = {"fingerprint": fingerprint, "since_ms": since_ms or 0, "cutoff_ms": cutoff}
    count = q.dead_count(topic, fingerprint or None, since_ms or 0, cutoff)
    samples, _ = message_page(topic, MessageState.dead, after=None, since_ms=since_ms, until_ms=cutoff,
                              fingerprint=fingerprint, limit=5)
    return {"scope": scope, "count": count, "samples": samples, "words": replay_scope_words(topic, scope)}
