"""A topic's Redis memory: ``memory`` (what the topic takes, its share of ``maxmemory`` and the
time until Redis is full at the current growth). Plain commands, no script. The budget that
refuses publishes above a limit is enforced by publish.lua (includes/budget.lua)."""

from dataclasses import dataclass
from typing import ClassVar

from ..config import budget_share
from ..keys import DEFAULT_GROUP, GROUP_KEY_NAMES, HASHTABLE_FIELD, MEMORY_SAMPLES, PARTITION_KEY_NAMES
from ..steps import operation, pipeline
from .base import EngineBase, as_text

RATE_MINUTES = 5       # whole minutes the publish and ack rates are averaged over


@dataclass(frozen=True, slots=True)
class TopicMemory:
    """What ``q.memory(topic)`` measured. Bytes are Redis's own MEMORY USAGE estimates (each key
    sampled, never walked): 95-96 % of what used_memory grew by in docs/design.md's check."""

    RATE_MINUTES: ClassVar[int] = RATE_MINUTES

    topic: str
    partitions: int             # each enforces its share of a budget (the limit / partitions, rounded up)
    messages: int               # stored messages (each once, whatever its groups)
    measured_bytes: int         # sum of MEMORY USAGE over the topic's keys
    keys_sampled: int           # keys measured (all the topic's keys that exist: bounded by its layout)
    used_memory: int            # INFO memory: the whole server
    maxmemory: int              # 0 = no limit set
    maxmemory_policy: str
    publish_rate: float         # messages per second published over the last RATE_MINUTES whole minutes
    ack_rate: float             # messages per second acked over the same minutes
    max_messages: int | None    # the topic's budget (TopicConfig), None = none
    max_bytes: int | None
    store_bytes: int            # MEMORY USAGE of the message stores: what max_bytes is checked against

    @property
    def bytes_per_message(self) -> float | None:
        """Measured bytes per stored message (payload, header, one entry in each group's state)."""
        return self.measured_bytes / self.messages if self.messages else None

    @property
    def estimated_bytes(self) -> int:
        """The topic's memory as Redis estimates it (messages x bytes per message, plus the keys'
        fixed part): the sampled measurement itself, under the name the console shows."""
        return self.measured_bytes

    @property
    def share(self) -> float | None:
        """The topic's part of ``maxmemory`` (0..1), None when Redis has no limit."""
        return self.measured_bytes / self.maxmemory if self.maxmemory else None

    @property
    def growth_rate(self) -> float:
        """Messages per second the topic grows by: published minus acked (dead letters stay)."""
        return self.publish_rate - self.ack_rate

    def share_of(self, limit: int) -> int:
        """Each partition's share of a budget of ``limit``."""
        return budget_share(limit, self.partitions)

    def _seconds_until(self, room: float, per_message: float | None) -> float | None:
        if self.growth_rate <= 0 or not per_message:
            return None
        return max(0.0, room) / (self.growth_rate * per_message)

    @property
    def time_to_full(self) -> float | None:
        """Seconds until Redis reaches ``maxmemory`` at the current growth, with the measured bytes
        per message; None when Redis has no limit or the topic is not growing."""
        if not self.maxmemory:
            return None
        return self._seconds_until(self.maxmemory - self.used_memory, self.bytes_per_message)

    @property
    def time_to_budget(self) -> float | None:
        """Seconds until the topic's own budget refuses publishes at the current growth (None:
        no budget or not growing)."""
        times = []
        if self.max_messages:
            times.append(self._seconds_until(self.max_messages - self.messages, 1))
        if self.max_bytes and self.messages:
            times.append(self._seconds_until(self.max_bytes - self.store_bytes, self.store_bytes / self.messages))
        times = [t for t in times if t is not None]
        return min(times) if times else None


class Memory(EngineBase):
    """memory."""

    def _memory(self, topic: str):
        """The topic's Redis memory and time to full. Two round trips: MEMORY USAGE (SAMPLES 64) of
        each of the topic's keys (their number is fixed by its partitions and groups, never by its
        messages) with HLEN of the message stores and the per-minute counters; then INFO memory
        and TIME."""
        layout = yield from self._layout(topic, fresh=True)
        cfg = yield from self._topic_config(topic)
        rate_group = DEFAULT_GROUP if DEFAULT_GROUP in layout.groups or not layout.groups else layout.groups[0]
        (sec, _usec), info = yield pipeline(lambda pipe: (pipe.time(), pipe.info("memory")))
        minute = int(sec) // 60
        minutes = range(minute - RATE_MINUTES, minute)   # whole minutes: the current one is partial
        fields = [f"{m}:{e}" for m in minutes for e in ("published", "acked")]
        names = []
        for p in range(layout.partitions):
            names += [getattr(self.keys(topic, p).p, n) for n in PARTITION_KEY_NAMES]
            for g in layout.groups:
                names += [getattr(self.keys(topic, p, g).g, n) for n in GROUP_KEY_NAMES]
        names = list(dict.fromkeys(names))

        def fill(pipe):
            for name in names:
                pipe.memory_usage(name, samples=MEMORY_SAMPLES)
            for p in range(layout.partitions):
                msgs = self.keys(topic, p).msgs
                pipe.hlen(msgs)
                pipe.hexists(msgs, HASHTABLE_FIELD)
                pipe.hmget(self.keys(topic, p, rate_group).g.minutes, fields)
        replies = yield pipeline(fill)
        sizes = dict(zip(names, replies[:len(names)], strict=True))
        rest = replies[len(names):]
        messages = published = acked = store = 0
        for p in range(layout.partitions):
            count, marker, counters = rest[3 * p:3 * p + 3]
            messages += count - int(marker)
            store += sizes.get(self.keys(topic, p).msgs) or 0
            for i, v in enumerate(counters):
                if v:
                    if i % 2:
                        acked += int(v)
                    else:
                        published += int(v)
        seconds = RATE_MINUTES * 60
        return TopicMemory(
            topic=topic, partitions=layout.partitions, messages=messages, measured_bytes=sum(s for s in sizes.values() if s),
            keys_sampled=sum(1 for s in sizes.values() if s), used_memory=int(info.get("used_memory", 0)),
            maxmemory=int(info.get("maxmemory", 0)), maxmemory_policy=as_text(info.get("maxmemory_policy", "")),
            publish_rate=published / seconds, ack_rate=acked / seconds, max_messages=cfg.max_messages,
            max_bytes=cfg.max_bytes, store_bytes=store)

    memory = operation(_memory)

