"""Configuration of topics, partitions and consumer groups (lua/layout.lua, delete_group.lua), and
pause/resume.

Writes go to every partition, partition 0 first: its layout is the source of truth, and a
publisher whose cached layout is stale is refused by publish.lua and routes again. A new group is
configured before it joins the layout, so its first message already sees its settings. Reading a
topic's or a group's configuration is in base.py: publishing and statistics read it too.
"""


from ..config import GroupConfig, TopicConfig
from ..errors import InvalidArgument, TopicNotEmpty
from ..keys import (
    DEFAULT_GROUP,
    GROUP_KEY_NAMES,
    HASHTABLE_FIELD,
    hold_key,
    holds_key,
    index_legacy_keys,
    index_log_keys,
    validate_group,
    validate_topic,
)
from ..layout import TopicLayout
from ..steps import cmd, operation, pipeline, script
from .base import EngineBase, as_text

DELETE_BATCH = 500   # messages released per delete_group script call


def _check_shares(topic: str, group: str, cfg: GroupConfig, partitions: int) -> None:
    """Group-wide limits are kept as a share per partition (no script spans two): each share
    must be at least one, or a partition would never be claimed (max_in_flight) or the shares'
    first bursts would exceed the limit (rate)."""
    for name, value in (("max_in_flight", cfg.max_in_flight), ("rate", cfg.rate[0] if cfg.rate else None)):
        if value is not None and value < partitions:
            raise InvalidArgument(
                f"group {group!r} of topic {topic!r}: {name} allows {value} but the topic has {partitions} "
                f"partitions; each partition keeps a share of a group-wide limit, so it must be at least "
                f"{partitions} (lower the partitions or raise the limit)")


INDEX_FIELDS = ("indexes", "index_seq", "index_ready")   # a topic's indexed fields (engine/index.py)


class Configure(EngineBase):
    """Topics, partitions, groups, pause and resume."""

    def _set_layout(self, topic: str, op: str, arg: str | int):
        """Change partition 0's layout atomically, then copy it to the other partitions."""
        raw = yield script(self.scripts.layout, self.keys(topic).p.as_list(),
                           [op, arg])
        layout = TopicLayout.parse(raw)
        old = yield from self._layout(topic)
        for p in range(1, max(layout.partitions, old.partitions)):
            pk = self.keys(topic, p).p
            yield script(self.scripts.layout, pk.as_list(), ["set", layout.signature])
        self._layouts.drop(topic)
        return layout

    def _signal(self, topic: str, group: str, partitions: int):
        # A resumed or reconfigured group is claimed at once, not after a worker's idle wait.
        def fill(pipe):
            for p in range(partitions):
                k = self.keys(topic, p, group)
                pipe.rpush(k.signal, "1")
                pipe.ltrim(k.signal, -64, -1)
        yield pipeline(fill)

    def _configure_topic(self, topic: str, config: TopicConfig | None = None, **options):
        """Write the topic's configuration and its default group's settings. Options not given take
        the TopicConfig defaults, not the previous values: the caller states the whole config.
        Changing ``partitions`` is refused (TopicNotEmpty) while any group holds a message."""
        validate_topic(topic)
        cfg = (config or TopicConfig()).replace(**options) if options else (config or TopicConfig())
        layout = yield from self._layout(topic, fresh=True)
        repartitioned = cfg.partitions != layout.partitions
        if repartitioned:
            held = yield from self._message_count(topic)
            if held:
                raise TopicNotEmpty(
                    f"topic {topic!r} holds {held:,} message(s), so its partition count cannot change from "
                    f"{layout.partitions} to {cfg.partitions} (messages would be routed to other partitions). "
                    "Drain or purge it first, or publish to a new topic.")
            kept = yield from self._held(topic)
            if any(h.messages for h in kept):
                raise TopicNotEmpty(
                    f"topic {topic!r} keeps {sum(h.messages for h in kept):,} removed message(s) for undo "
                    f"(operations {', '.join(sorted({h.operation for h in kept if h.messages}))}), so its partition "
                    f"count cannot change from {layout.partitions} to {cfg.partitions}: undo would put them in "
                    "partitions they no longer route to. Undo them, or wait until their holding areas expire.")
        # Topic fields go to every partition the topic has or will have, and each group's settings
        # to new partitions, before the layout grows: a publisher routed to a new partition finds
        # its configuration there.
        count = max(cfg.partitions, layout.partitions)
        # The indexed fields' declaration (engine/index.py) goes to new partitions as it is.
        index_fields = {k: v for k, v in zip(INDEX_FIELDS, (yield cmd("hmget", self.keys(topic, 0).config,
                                                                       list(INDEX_FIELDS))), strict=True) if v is not None}
        group_fields = {}
        for g in layout.groups:
            group_fields[g] = yield cmd("hgetall", self.keys(topic, 0, g).g.config)
            if cfg.partitions > layout.partitions and group_fields[g]:
                _check_shares(topic, g, GroupConfig.from_fields({as_text(k): as_text(v) for k, v
                                                                 in group_fields[g].items()}), cfg.partitions)
        for p in range(count):
            def fill(pipe, p=p):
                pipe.hset(self.keys(topic, p).config, mapping=cfg.topic_fields())
                if not cfg.max_bytes:   # the exact byte count is kept for a bytes budget only (usage.lua)
                    pipe.hdel(self.keys(topic, p).usage, "bytes")
                if p >= layout.partitions:
                    if index_fields:
                        pipe.hset(self.keys(topic, p).config, mapping=index_fields)
                    for g, fields in group_fields.items():
                        if fields:
                            pipe.hset(self.keys(topic, p, g).g.config, mapping=fields)
                if DEFAULT_GROUP in layout.groups:
                    pipe.hset(self.keys(topic, p, DEFAULT_GROUP).g.config, mapping=cfg.default_group_fields())
            yield pipeline(fill, transaction=True)
        layout = yield from self._set_layout(topic, "partitions", cfg.partitions)
        if cfg.partitions < count:
            for p in range(cfg.partitions, count):   # empty partitions no longer in use
                yield from self._delete_partition_keys(topic, p, layout.groups)
        yield from self._register(topic, always=True)
        for group in layout.groups:
            # The default group is claimed at once (resumed or reconfigured); every group's
            # workers when the partition count changed: their next claim reads the new count and
            # they take the new partitions (worker/base.py _fetching).
            if group == DEFAULT_GROUP and not cfg.paused or repartitioned:
                yield from self._signal(topic, group, layout.partitions)
        return cfg

    configure_topic = operation(_configure_topic)

    def _delete_partition_keys(self, topic: str, p: int, groups):
        pk = self.keys(topic, p).p
        names = pk.as_list() + index_log_keys(pk) + index_legacy_keys(pk)
        for group in groups:
            names += [getattr(self.keys(topic, p, group).g, n) for n in GROUP_KEY_NAMES]
        for name in names:   # one at a time: on a cluster the keys of two groups may not share a slot
            yield cmd("unlink", name)

    def _is_configured(self, topic: str):
        return bool((yield cmd("exists", self.keys(topic).config)))

    is_configured = operation(_is_configured)

    def _message_count(self, topic: str):
        """Messages stored in the topic (each counted once, whatever its groups). One round trip
        per partition, pipelined."""
        partitions = (yield from self._layout(topic)).partitions

        def fill(pipe):
            for p in range(partitions):
                pipe.hlen(self.keys(topic, p).msgs)
                pipe.hexists(self.keys(topic, p).msgs, HASHTABLE_FIELD)
        replies = yield pipeline(fill)
        return sum(n - int(marker) for n, marker in zip(replies[0::2], replies[1::2], strict=True))

    message_count = operation(_message_count)

    def _groups(self, topic: str):
        """The topic's consumer groups, in the order they were added. One round trip."""
        return list((yield from self._layout(topic, fresh=True)).groups)

    groups = operation(_groups)

    def _configure_group(self, topic: str, group: str, config: GroupConfig | None = None, **options):
        """Create or reconfigure a consumer group. Options not given take the GroupConfig defaults:
        the caller states the whole config. A new group receives the messages published after
        this call returns (not the ones already in the topic)."""
        validate_topic(topic)
        validate_group(group)
        cfg = (config or GroupConfig()).replace(**options) if options else (config or GroupConfig())
        if cfg.limited and not (yield cmd("sismember", self._registry_key(), topic)):
            # A limit on a misspelt topic would silently limit nothing.
            raise InvalidArgument(f"topic {topic!r} does not exist: configure_topic() it or publish to it before "
                                  "setting dispatch limits on its groups")
        layout = yield from self._layout(topic, fresh=True)
        _check_shares(topic, group, cfg, layout.partitions)
        for p in range(layout.partitions):
            gk = self.keys(topic, p, group).g
            # resumed_at is a fact, not an option (lua/includes/lateness.lua): kept, and written
            # when this call unpauses the group, as resume() does.
            was_paused, resumed_at = (yield cmd("hmget", gk.config, "paused", "resumed_at"))
            fields = cfg.to_fields()
            if was_paused is not None and as_text(was_paused) == "1" and not cfg.paused:
                fields["resumed_at"] = yield from self._server_ms()
            elif resumed_at is not None:
                fields["resumed_at"] = as_text(resumed_at)

            def fill(pipe, gk=gk, fields=fields):
                pipe.delete(gk.config)
                pipe.hset(gk.config, mapping=fields)
            yield pipeline(fill, transaction=True)
        if group not in layout.groups:
            layout = yield from self._set_layout(topic, "add", group)
            if not (yield cmd("exists", self.keys(topic).config)):
                yield cmd("hset", self.keys(topic).config, mapping=TopicConfig().topic_fields())
        yield from self._register(topic, always=True)
        if not cfg.paused:
            yield from self._signal(topic, group, layout.partitions)
        return cfg

    configure_group = operation(_configure_group)

    def _delete_group(self, topic: str, group: str, *, actor: str | None = None, progress=None):
        """Remove a group and its messages: it leaves the layout at once (no new message reaches
        it), then its messages are released in bounded batches (payloads no other group holds are
        freed) and its keys deleted. Returns how many messages it held. ``progress`` is called
        with the running total after each batch."""
        validate_group(group)
        layout = yield from self._layout(topic, fresh=True)
        if group not in layout.groups:
            raise InvalidArgument(f"topic {topic!r} has no group {group!r}; its groups are "
                                  f"{', '.join(layout.groups) or 'none'}")
        yield from self._set_layout(topic, "remove", group)
        total = 0
        for p in range(layout.partitions):
            keys = self.keys(topic, p, group).as_list()
            while True:
                n = int((yield script(self.scripts.delete_group, keys, [DELETE_BATCH, actor or self.actor, group])))
                total += n
                if progress:
                    progress(total)
                if n < DELETE_BATCH:
                    break
            for name in GROUP_KEY_NAMES:
                yield cmd("unlink", getattr(self.keys(topic, p, group).g, name))
            yield from self._drop_holds(topic, p, group)
        return total

    def _drop_holds(self, topic: str, partition: int, group: str):
        """Delete the holding areas (engine/undo.py) of a deleted group in one partition, and their
        registry entries: nothing can be put back into a group that is gone. ZSCAN, a bounded
        step per call."""
        registry, cursor = holds_key(topic, partition, self.prefix), 0
        while True:
            cursor, rows = yield cmd("zscan", registry, cursor, match=f"{group}|*", count=500)
            for member, _ in rows:
                hold = as_text(member).split("|", 1)[1]
                yield cmd("unlink", hold_key(topic, partition, group, hold, self.prefix))
                yield cmd("zrem", registry, member)
            if not int(cursor):
                return

    delete_group = operation(_delete_group)

    def _pause(self, topic: str, group: str = DEFAULT_GROUP):
        """Workers of ``group`` stop claiming; publishing and promotion go on."""
        validate_group(group)
        for p in range((yield from self._layout(topic)).partitions):
            yield cmd("hset", self.keys(topic, p, group).g.config, "paused", "1")
        yield from self._register(topic, always=True)

    pause = operation(_pause)

    def _resume(self, topic: str, group: str = DEFAULT_GROUP):
        validate_group(group)
        partitions = (yield from self._layout(topic)).partitions
        # By Redis's clock: claims compare it with due times to say a delivery was late because the
        # group was paused (lua/includes/lateness.lua).
        now_ms = yield from self._server_ms()
        for p in range(partitions):
            config = self.keys(topic, p, group).g.config
            # Only a group that was paused has a paused backlog: a resume of a running one changes
            # nothing (else every message due before it would be labelled "paused").
            if as_text((yield cmd("hget", config, "paused")) or b"") == "1":
                yield cmd("hset", config, mapping={"paused": "0", "resumed_at": now_ms})
        yield from self._signal(topic, group, partitions)

    resume = operation(_resume)
