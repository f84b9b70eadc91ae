"""Django topics and consumer groups -> engine configuration.

A saved Topic, ConsumerGroup (or RetryPolicy) is written to the engine's config hashes after the
transaction commits: the topic's own settings (with its default group's), then each of its groups.
Only the fields the rows own are written (config_map.py lists them); every other engine setting
keeps the value it was given from Python. configure_topic() writes the whole config atomically
(MULTI), so a Redis outage leaves the old config in place, never half of the new one; the failure
is recorded on the Topic (``sync_error``) and the next save, admin "sync" action or
``manage.py dq_sync_topics`` repairs it.
"""

import logging
from dataclasses import dataclass, fields

import redis
from django.db import transaction
from django.utils import timezone

from queue_core import GroupConfig, QueueError, TopicConfig

from . import config_map
from .contracts import DEFAULT_GROUP, is_bridge_topic
from .engine import get_queue
from .indexes import write_indexes

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


class UnknownTopic(LookupError):
    """The topic (or group) exists neither in Redis nor in the database."""


def drift(topic) -> Drift:
    """Compare the engine's config in Redis with the Topic row and its ConsumerGroup rows: the
    fields the rows own (partitions included), then ``group <name>: <field>`` for each group (the
default group's dispatch limits among them), and
    groups the engine lacks. A few round trips."""
    q = get_queue()
    if not q.is_configured(topic.name):
        return Drift(topic.name, {}, True)
    have = q.topic_config(topic.name)
    want = topic.engine_config(have)
    diffs = {f.name: (getattr(have, f.name), getattr(want, f.name)) for f in fields(TopicConfig)
             if getattr(have, f.name) != getattr(want, f.name)}
    have_ix, want_ix = [i.field for i in q.indexes(topic.name)], topic.index_fields()
    if have_ix != want_ix:
        diffs["indexed fields"] = (have_ix, want_ix)
    engine_groups = q.groups(topic.name)
    have_d = q.group_config(topic.name)
    want_d = topic.default_group_config(have_d)
    diffs.update({f"group {DEFAULT_GROUP}: {name}": (getattr(have_d, name), getattr(want_d, name))
                  for name in config_map.LIMITS if getattr(have_d, name) != getattr(want_d, name)})
    for group in topic.groups.select_related("retry_policy"):
        if group.name not in engine_groups:
            diffs[f"group {group.name}"] = ("missing", "defined")
            continue
        have_g = q.group_config(topic.name, group.name)
        want_g = group.engine_config(have_g)
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
        if is_bridge_topic(topic.name):
            _sync_bridge_pause(q, topic, groups)
        else:
            _write_owned_fields(q, topic, groups)
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


def _write_owned_fields(q, topic, groups) -> None:
    """Read each config, replace the rows' fields, write it back. configure_topic/configure_group
    reset every option they are not given to its default, so writing the rows alone would wipe
    events_maxlen, history_max, max_delay, hold_key_on_dead... set from Python. Known race: a
    Python-side configure_topic/configure_group landing between this read and this write is
    overwritten for its engine-only fields (the engine has no per-field update to avoid it);
    running the Python-side configure again restores them."""
    q.configure_topic(topic.name, topic.engine_config(q.topic_config(topic.name)))
    write_indexes(q, topic)     # a field to build is built by the operation the admin's save starts
    default = q.group_config(topic.name)
    if topic.default_group_config(default) != default:
        # The default group's limits are the Topic row's; configure_topic does not state them.
        q.configure_group(topic.name, DEFAULT_GROUP, topic.default_group_config(default))
    for group in groups:
        q.configure_group(topic.name, group.name, group.engine_config(q.group_config(topic.name, group.name)))


def _sync_bridge_pause(q, topic, groups) -> None:
    """A Celery bridge topic's configuration is the bridge's: only pause/resume are written, and
    only to a topic the bridge has created (a pause must not create one)."""
    engine_groups = q.groups(topic.name) if q.is_configured(topic.name) else []
    wanted = [(DEFAULT_GROUP, topic.paused), *((g.name, g.paused) for g in groups)]
    for name, paused in wanted:
        if name in engine_groups and q.group_config(topic.name, name).paused != paused:
            (q.pause if paused else q.resume)(topic.name, name)


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
    """Create a Topic and a ConsumerGroup row for each of its other groups from the engine's
    config, so that the sync that follows writes back exactly what Redis has (partition count
    included). A retry policy identical to the engine's is reused, except for a Celery bridge
    topic, which gets its own (its policy cannot be edited, see RetryPolicy.clean)."""
    from ..models import ConsumerGroup, Topic

    q = get_queue()
    if name not in q.topics():
        raise UnknownTopic(f"There is no topic {name!r} in Redis to adopt.")
    cfg = q.topic_config(name)
    default = q.group_config(name)
    groups = {g: q.group_config(name, g) for g in q.groups(name) if g != DEFAULT_GROUP}
    own_policy = is_bridge_topic(name)
    with transaction.atomic():
        topic = Topic.objects.create(name=name, retry_policy=_policy_for(cfg.retry, name, own_policy),
                                     description="Adopted from Redis.", **config_map.topic_row_fields(cfg),
                                     **config_map.limit_row_fields(default))
        for group, gcfg in groups.items():
            ConsumerGroup.objects.create(topic=topic, name=group, description="Adopted from Redis.",
                                         retry_policy=_policy_for(gcfg.retry, f"{name} / {group}", own_policy),
                                         **config_map.group_row_fields(gcfg))
    return topic


def _policy_for(engine_policy, owner: str, own: bool):
    from ..models import RetryPolicy

    fields_ = config_map.policy_row_fields(engine_policy)
    policy = None if own else RetryPolicy.objects.filter(**fields_).first()
    if policy is None:
        names = set(RetryPolicy.objects.filter(name__startswith=f"{owner} (adopted").values_list("name", flat=True))
        name = next(n for n in (f"{owner} (adopted{f' {i}' if i > 1 else ''})" for i in range(1, len(names) + 2))
                    if n not in names)
        policy = RetryPolicy.objects.create(name=name, **fields_, description=f"Created when {owner} was adopted.")
    return policy


def set_paused(topic_name: str, paused: bool, group: str = DEFAULT_GROUP) -> None:
    """Pause or resume one group; managed ones through their row (synced after commit: the
    topic's own row for the default group), unmanaged ones directly. UnknownTopic when neither
    Redis nor the database has the topic or group: a pause must not create one."""
    from ..models import ConsumerGroup, Topic

    row = (Topic.objects.filter(name=topic_name).first() if group == DEFAULT_GROUP else
           ConsumerGroup.objects.filter(topic__name=topic_name, name=group).first())
    if row is not None:
        row.paused = paused
        row.save(update_fields=["paused", "updated"])  # post_save syncs after commit
        return
    q = get_queue()
    if topic_name not in q.topics():
        raise UnknownTopic(f"There is no topic {topic_name!r} in Redis or the database, so there is nothing to "
                           f"{'pause' if paused else 'resume'}; check the name on the overview.")
    if group not in q.groups(topic_name):
        raise UnknownTopic(f"Topic {topic_name!r} has no consumer group {group!r}; its groups are "
                           f"{', '.join(q.groups(topic_name)) or 'none'}.")
    (q.pause if paused else q.resume)(topic_name, group)
