"""Django topics and consumer groups -> engine configuration.

A saved Topic, ConsumerGroup (or RetryPolicy) is written to the engine's config hashes after the
transaction commits: the topic's own settings (with its default group's), then each of its groups. configure_topic() writes the whole config atomically (MULTI), so a Redis outage leaves the
old config in place, never half of the new one; the failure is recorded on the Topic
(``sync_error``) and the next save, admin "sync" action or ``manage.py dq_sync_topics`` repairs it.
"""

import logging
from dataclasses import dataclass, fields

import redis
from django.db import transaction
from django.utils import timezone

from queue_core import GroupConfig, QueueError, TopicConfig

from .contracts import DEFAULT_GROUP
from .engine import get_queue

log = logging.getLogger("delayq.dashboard")


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
    """Compare the engine's config in Redis with the Topic row and its ConsumerGroup rows: topic
    fields (partitions included), then ``group <name>: <field>`` for each group, and groups the
    engine lacks. A few round trips."""
    q = get_queue()
    want = topic.engine_config()
    if not q.is_configured(topic.name):
        return Drift(topic.name, {}, True)
    have = q.topic_config(topic.name)
    diffs = {f.name: (getattr(have, f.name), getattr(want, f.name)) for f in fields(TopicConfig)
             if getattr(have, f.name) != getattr(want, f.name)}
    engine_groups = q.groups(topic.name)
    for group in topic.groups.select_related("retry_policy"):
        if group.name not in engine_groups:
            diffs[f"group {group.name}"] = ("missing", "defined")
            continue
        have_g, want_g = q.group_config(topic.name, group.name), group.engine_config()
        diffs.update({f"group {group.name}: {f.name}": (getattr(have_g, f.name), getattr(want_g, f.name))
                      for f in fields(GroupConfig) if getattr(have_g, f.name) != getattr(want_g, f.name)})
    return Drift(topic.name, diffs, False)


def sync_topic(topic) -> str | None:
    """Write one topic's config, then each of its groups', to Redis; record the outcome on the
    rows. Returns the error or None."""
    from ..models import ConsumerGroup, Topic

    q = get_queue()
    groups = list(topic.groups.select_related("retry_policy"))
    try:
        q.configure_topic(topic.name, topic.engine_config())
        for group in groups:
            q.configure_group(topic.name, group.name, group.engine_config())
    except (redis.RedisError, QueueError) as exc:
        # QueueError: the engine refused (e.g. a new partition count while the topic holds messages).
        cause = f"to Redis ({exc})" if isinstance(exc, redis.RedisError) else f"(the engine refused: {exc})"
        error = (f"Could not write the configuration {cause}. The previous configuration stays in "
                 "force; it will be written by the next save, the admin 'sync' action or "
                 "'manage.py dq_sync_topics'.")
        Topic.objects.filter(pk=topic.pk).update(sync_error=error)
        ConsumerGroup.objects.filter(topic=topic).update(sync_error=error)
        log.warning("sync of topic %s failed: %s", topic.name, exc)
        return error
    now = timezone.now()
    Topic.objects.filter(pk=topic.pk).update(sync_error="", synced_at=now)
    ConsumerGroup.objects.filter(topic=topic).update(sync_error="", synced_at=now)
    return None


def sync_after_commit(topic_ids) -> None:
    """Schedule a sync of these topics once the current transaction commits (or now, outside one)."""
    from ..models import Topic

    ids = list(topic_ids)

    def run():
        for topic in Topic.objects.filter(pk__in=ids).select_related("retry_policy"):
            sync_topic(topic)
    transaction.on_commit(run)


def unmanaged_topics() -> list[str]:
    """Topics Redis knows that have no Topic row."""
    from ..models import Topic

    known = set(Topic.objects.values_list("name", flat=True))
    return [t for t in get_queue().topics() if t not in known]


def adopt(name: str):
    """Create a Topic (and, if no identical one exists, a RetryPolicy) from the engine's config."""
    from ..models import RetryPolicy, Topic

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


def set_paused(topic_name: str, paused: bool, group: str = DEFAULT_GROUP) -> None:
    """Pause or resume one group; managed ones through their row (synced after commit: the
    topic's own row for the default group), unmanaged ones directly."""
    from ..models import ConsumerGroup, Topic

    row = (Topic.objects.filter(name=topic_name).first() if group == DEFAULT_GROUP else
           ConsumerGroup.objects.filter(topic__name=topic_name, name=group).first())
    if row is not None:
        row.paused = paused
        row.save(update_fields=["paused", "updated"])  # post_save syncs after commit
    elif paused:
        get_queue().pause(topic_name, group)
    else:
        get_queue().resume(topic_name, group)
