"""A topic's Redis memory: ``memory`` (what the topic takes, its share of ``maxmemory`` and the
time until Redis is full at the current growth). Plain commands, no script. The budget that
refuses publishes above a limit is enforced by publish.lua (includes/budget.lua)."""

from dataclasses import dataclass
from typing import ClassVar

from ..config import budget_share
from ..errors import InvalidArgument
from ..keys import (
    DEFAULT_GROUP,
    GROUP_KEY_NAMES,
    HASHTABLE_FIELD,
    MEMORY_SAMPLES,
    PARTITION_KEY_NAMES,
    hold_key,
    index_legacy_keys,
    index_log_keys,
)
from ..steps import operation, pipeline
from .base import EngineBase, as_text

# The publish and ack rates are averaged over the last RATE_MINUTES whole minutes (the per-minute
# counters keep 61), or since the topic's first counted minute when that is later, but never fewer
# than MIN_RATE_MINUTES: a one-off burst is spread over the window instead of setting the pace (a
# burst of 6,000 in one minute read as 20/s over 5 minutes; it is 6.7/s over 15, then decays).
# A topic whose whole history is counted (its lifetime "published" is no more than the minutes
# hold) and shorter than that is averaged over its own whole minutes, 1 at least: 15 read a
# 2-minute-old topic's steady pace 7.5 times too slow.
RATE_MINUTES = 60
MIN_RATE_MINUTES = 15
# The topic's keys whose size does not grow with its messages (configuration, counters, the events
# stream capped at events_maxlen, schedules, batch records, fingerprints, fairness state): reported
# as fixed_bytes, apart from the bytes per message. Every other key holds an entry per message.
FIXED_PARTITION_KEYS = frozenset({"config", "events", "schedules", "schedule_due", "schedule_runs", "batches",
                                  "batch_outbox", "batch_index", "usage", "holds", "ixs"})
FIXED_GROUP_KEYS = frozenset({"config", "fp_count", "fp_info", "stats", "minutes", "workers", "signal", "active",
                              "fring", "fkst", "fsolo", "batches"})


@dataclass(frozen=True, slots=True)
class TopicMemory:
    """What ``q.memory(topic)`` measured. The message store is the exact byte count the budget
    reads (includes/usage.lua); the other keys are Redis's own MEMORY USAGE estimates (each key
    sampled, never walked). On Redis Cluster, maxmemory, used_memory, share and time to full are
    those of the fullest node holding one of the topic's partitions (``node_partitions`` of them)."""

    RATE_MINUTES: ClassVar[int] = RATE_MINUTES
    MIN_RATE_MINUTES: ClassVar[int] = MIN_RATE_MINUTES

    topic: str
    partitions: int             # each enforces its share of a budget (the limit / partitions, rounded up)
    messages: int               # stored messages (each once, whatever its groups)
    message_bytes: int          # what grows per message: the message store and each group's entries
    fixed_bytes: int            # the keys that do not grow per message (FIXED_*_KEYS: events stream, ...)
    keys_sampled: int           # keys measured (all the topic's keys that exist: bounded by its layout)
    used_memory: int            # INFO memory: the whole server (on a cluster: the fullest node's)
    maxmemory: int              # 0 = no limit set
    maxmemory_policy: str
    publish_rate: float         # messages per second published over the last ``rate_minutes`` whole minutes
    ack_rate: float             # messages per second acked over the same minutes (what left: dead letters stay)
    max_messages: int | None    # the topic's budget (TopicConfig), None = none
    max_bytes: int | None
    store_bytes: int            # the message stores' bytes: what max_bytes is checked against
    held_messages: int = 0      # kept for undo (q.held_size): counted in the budget and the estimate
    held_bytes: int = 0
    partition_messages: tuple[int, ...] = ()   # per partition: messages + held ones (what the budget counts)
    partition_bytes: tuple[int, ...] = ()      # per partition: store + held bytes
    nodes: int = 1              # servers holding the topic's partitions
    node_partitions: int = 0    # the topic's partitions on the node measured (0: all of them)
    node_bytes: int | None = None   # the topic's bytes on that node (None: all of them)
    # The whole minutes the rates are averaged over: since the first counted minute, MIN_RATE_MINUTES
    # to RATE_MINUTES (fewer, 1 at least, when rate_all_history).
    rate_minutes: int = RATE_MINUTES
    rate_all_history: bool = False   # the topic is younger than MIN_RATE_MINUTES: the rates cover all of it

    @property
    def measured_bytes(self) -> int:
        """Everything the topic takes: its messages, its fixed keys and what is held for undo."""
        return self.message_bytes + self.fixed_bytes + self.held_bytes

    @property
    def bytes_per_message(self) -> float | None:
        """Bytes each stored message adds (its record and its entries in the groups' keys), without
        the fixed keys: what the time to full multiplies the growth by."""
        return self.message_bytes / self.messages if self.messages else None

    @property
    def estimated_bytes(self) -> int:
        """The topic's memory: messages x bytes per message, plus the fixed keys and the held ones."""
        return self.measured_bytes

    @property
    def share(self) -> float | None:
        """The topic's part of ``maxmemory`` (0..1; of the fullest node on a cluster), None when
        Redis has no limit."""
        if not self.maxmemory:
            return None
        return (self.measured_bytes if self.node_bytes is None else self.node_bytes) / self.maxmemory

    @property
    def growth_rate(self) -> float:
        """Messages per second the topic grows by: published minus acked (dead letters stay)."""
        return self.publish_rate - self.ack_rate

    def share_of(self, limit: int) -> int:
        """Each partition's share of a budget of ``limit``."""
        return budget_share(limit, self.partitions)

    def _seconds_until(self, room: float, per_second: float) -> float | None:
        if per_second <= 0:
            return None
        return max(0.0, room) / per_second

    @property
    def time_to_full(self) -> float | None:
        """Seconds until Redis (the fullest node on a cluster) reaches ``maxmemory`` at the current
        growth, with the bytes per message; None when Redis has no limit or the topic is not
        growing. Publishes spread over the partitions, so a node grows by its partitions' part."""
        if not self.maxmemory or not self.bytes_per_message:
            return None
        part = (self.node_partitions or self.partitions) / self.partitions
        return self._seconds_until(self.maxmemory - self.used_memory, self.growth_rate * part * self.bytes_per_message)

    @property
    def time_to_budget(self) -> float | None:
        """Seconds until the topic's own budget refuses publishes at the current growth: the first
        partition to reach its share (publishes spread evenly, so each grows by growth /
        partitions). None: no budget or not growing."""
        per_partition = self.growth_rate / self.partitions
        times = []
        for count, size in zip(self.partition_messages, self.partition_bytes, strict=True):
            if self.max_messages:
                times.append(self._seconds_until(self.share_of(self.max_messages) - count, per_partition))
            if self.max_bytes and self.messages:
                each = self.store_bytes / self.messages
                times.append(self._seconds_until(self.share_of(self.max_bytes) - size, per_partition * each))
        times = [t for t in times if t is not None]
        return min(times) if times else None


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """How full a topic's memory budget is (``q.budget_use``): what the budget counts in each
    partition (messages stored and held for undo; the store's bytes and the held ones) against that
    partition's share. Cheap enough for every page that lists topics (no MEMORY USAGE of the
    topic's other keys, no INFO): the numbers publish.lua's budget check reads itself."""

    topic: str
    partitions: int
    max_messages: int | None
    max_bytes: int | None
    partition_messages: tuple[int, ...]
    partition_bytes: tuple[int, ...]

    @property
    def fullness(self) -> float:
        """The fullest partition's use of its share, over both limits (1.0 or more: a publish there
        is refused with TopicFull). Publishes spread over the partitions, so the first one to fill
        is what refuses."""
        shares = []
        if self.max_messages:
            shares += [n / budget_share(self.max_messages, self.partitions) for n in self.partition_messages]
        if self.max_bytes:
            shares += [b / budget_share(self.max_bytes, self.partitions) for b in self.partition_bytes]
        return max(shares, default=0.0)

    @property
    def full(self) -> bool:
        return self.fullness >= 1.0

    @property
    def full_partitions(self) -> int:
        """The partitions at or over their share of either limit: a publish routed to one of them is
        refused, one routed to another is not (``full`` says only that the fullest is)."""
        full = [False] * len(self.partition_messages)
        for limit, used in ((self.max_messages, self.partition_messages), (self.max_bytes, self.partition_bytes)):
            if limit:
                full = [f or u >= budget_share(limit, self.partitions) for f, u in zip(full, used, strict=True)]
        return sum(full)


def _node_of(key):
    """The cluster node holding ``key`` (a step: the client's own slot map)."""
    return lambda client: client.get_node_from_key(key)


def _on_node(name, node, *args):
    """A command sent to one cluster node: redis-py's cluster pipeline refuses TIME and INFO."""
    return lambda client: getattr(client, name)(*args, target_nodes=node)


class Memory(EngineBase):
    """memory."""

    def _server_memory(self, topic, partitions):
        """(TIME, INFO memory, nodes, partitions on the node, their partition numbers) of the
        server, or on a cluster of the fullest node holding one of the topic's partitions (highest
        used_memory / maxmemory; without maxmemory the largest used_memory)."""
        if not self.cluster:
            (sec, _usec), info = yield pipeline(lambda pipe: (pipe.time(), pipe.info("memory")))
            return sec, info, 1, range(partitions)
        by_node: dict[str, tuple[object, list[int]]] = {}
        for p in range(partitions):
            node = yield _node_of(self.keys(topic, p).msgs)
            by_node.setdefault(node.name, (node, []))[1].append(p)
        best = None
        for node, parts in by_node.values():
            info = yield _on_node("info", node, "memory")
            used, limit = int(info.get("used_memory", 0)), int(info.get("maxmemory", 0))
            rank = (1, used / limit) if limit else (0, used)
            if best is None or rank > best[0]:
                best = (rank, node, info, parts)
        _, node, info, parts = best
        sec, _usec = yield _on_node("time", node)
        return sec, info, len(by_node), parts

    def _held_by_partition(self, topic, partitions, now_ms):
        """[(messages, bytes)] held for undo per partition, as the budget counts them
        (includes/usage.lua): the live holding areas (the 64 first to expire) and their counts."""
        return (yield from self._held_in([(topic, p) for p in range(partitions)], now_ms))

    def _held_in(self, slots, now_ms):
        """[(messages, bytes)] held for undo in each (topic, partition) of ``slots``: two round trips
        (the second only when an area is live)."""
        def live(pipe):
            for topic, p in slots:
                pipe.zrangebyscore(self.keys(topic, p).holds, now_ms, "+inf", start=0, num=64)
        areas = yield pipeline(live)

        def counts(pipe):
            for (topic, p), members in zip(slots, areas, strict=True):
                for m in members:
                    group, hold = m.decode().split("|", 1)
                    pipe.hget(self.keys(topic, p).usage, "held|" + hold_key(topic, p, group, hold, self.prefix))
        replies = iter((yield pipeline(counts)) if any(areas) else ())
        out = []
        for members in areas:
            n = b = 0
            for _ in members:
                v = next(replies)
                if v:
                    vn, vb = v.decode().split("|")
                    n, b = n + int(vn), b + int(vb)
            out.append((n, b))
        return out

    def _memory(self, topic: str):
        """The topic's Redis memory and time to full: MEMORY USAGE (SAMPLES 64) of each of the
        topic's keys (their number is fixed by its partitions and groups, never by its messages)
        with HLEN and the exact byte count of the message stores, the per-minute counters and the
        lifetime published count (is the topic younger than the rate window?) in one pipeline; INFO memory and TIME (one pipeline, or per node on a cluster); the holding
        areas (held_size). The rates: the default group's per-minute counters (rate_minutes)."""
        layout = yield from self._layout(topic, fresh=True)
        cfg = yield from self._topic_config(topic)
        rate_group = DEFAULT_GROUP if DEFAULT_GROUP in layout.groups or not layout.groups else layout.groups[0]
        sec, info, nodes, node_parts = yield from self._server_memory(topic, layout.partitions)
        minute = int(sec) // 60
        minutes = range(minute - RATE_MINUTES, minute)   # whole minutes: the current one is partial
        fields = [f"{m}:{e}" for m in minutes for e in ("published", "acked")]
        names: dict[str, tuple[int, bool]] = {}   # key -> (partition, fixed)
        for p in range(layout.partitions):
            for n in PARTITION_KEY_NAMES:
                names.setdefault(getattr(self.keys(topic, p).p, n), (p, n in FIXED_PARTITION_KEYS))
            pk = self.keys(topic, p).p
            for name in index_log_keys(pk) + index_legacy_keys(pk):   # entries per message (includes/index.lua)
                names.setdefault(name, (p, False))
            for g in layout.groups:
                for n in GROUP_KEY_NAMES:
                    names.setdefault(getattr(self.keys(topic, p, g).g, n), (p, n in FIXED_GROUP_KEYS))
        order = list(names)

        def fill(pipe):
            for name in order:
                pipe.memory_usage(name, samples=MEMORY_SAMPLES)
            for p in range(layout.partitions):
                pk = self.keys(topic, p)
                pipe.hlen(pk.msgs)
                pipe.hexists(pk.msgs, HASHTABLE_FIELD)
                pipe.hget(pk.usage, "bytes")
                gk = self.keys(topic, p, rate_group).g
                pipe.hmget(gk.minutes, fields)
                pipe.hget(gk.minutes, f"{minute}:published")   # the partial minute: for the history's length
                pipe.hget(gk.stats, "published")               # the lifetime count
        replies = yield pipeline(fill)
        sizes = dict(zip(order, (s or 0 for s in replies[:len(order)]), strict=True))
        rest = replies[len(order):]
        held = yield from self._held_by_partition(topic, layout.partitions, int(sec) * 1000)
        messages = published = acked = store = counted = lifetime = 0
        first = minute   # the oldest minute of the window with a counter
        per_messages, per_bytes = [], []
        for p in range(layout.partitions):
            count, marker, exact, counters, partial, ever = rest[6 * p:6 * p + 6]
            counted += int(partial or 0)
            lifetime += int(ever or 0)
            msgs = self.keys(topic, p).msgs
            # The exact count when it is kept; else (records from before it) Redis's sampled estimate.
            if exact is not None:
                sizes[msgs] = int(exact)
            messages += count - int(marker)
            store += sizes[msgs]
            per_messages.append(count - int(marker) + held[p][0])
            per_bytes.append(sizes[msgs] + held[p][1])
            for i, v in enumerate(counters):
                if v:
                    first = min(first, minutes[i // 2])
                    if i % 2:
                        acked += int(v)
                    else:
                        published += int(v)
        fixed = sum(s for name, s in sizes.items() if names[name][1])
        held_n, held_b = sum(h[0] for h in held), sum(h[1] for h in held)
        node_bytes = None
        if nodes > 1:
            on_node = set(node_parts)
            node_bytes = sum(s for name, s in sizes.items() if names[name][0] in on_node) + sum(
                held[p][1] for p in on_node)
        # Everything it ever published is in the minutes counted: the topic is that young.
        young = first < minute and lifetime <= counted + published
        window = max(1 if young else MIN_RATE_MINUTES, minute - first) if first < minute else RATE_MINUTES
        seconds = window * 60
        return TopicMemory(
            topic=topic, partitions=layout.partitions, messages=messages,
            message_bytes=sum(sizes.values()) - fixed, fixed_bytes=fixed,
            keys_sampled=sum(1 for s in sizes.values() if s), used_memory=int(info.get("used_memory", 0)),
            maxmemory=int(info.get("maxmemory", 0)), maxmemory_policy=as_text(info.get("maxmemory_policy", "")),
            publish_rate=published / seconds, ack_rate=acked / seconds, max_messages=cfg.max_messages,
            max_bytes=cfg.max_bytes, store_bytes=store, held_messages=held_n, held_bytes=held_b,
            partition_messages=tuple(per_messages), partition_bytes=tuple(per_bytes), nodes=nodes,
            node_partitions=len(node_parts) if nodes > 1 else 0, node_bytes=node_bytes, rate_minutes=window,
            rate_all_history=young and window < MIN_RATE_MINUTES)

    memory = operation(_memory)

    def _budget_use(self, topics):
        """{topic: BudgetUse} for those of ``topics`` with a budget (max_messages or max_bytes): the
        counts the budget is checked against, per partition. Round trips, measured (review 38w):
        the budgets (1; that is all when none is set), one pipeline of HLEN, HEXISTS and the exact
        byte count per partition (1), TIME (1), the live holding areas (1) and their counts (1,
        only when an area is live), MEMORY USAGE of the stores whose byte count is not kept yet
        (1, only then: publish.lua's fallback): 6 at most, plus 1 for layouts not cached (and a
        new connection's handshake, 4 commands with redis-py 8). Independent of the number of
        messages, and of topics beyond the pipelines' length. InvalidArgument for anything but an
        iterable of topic names (a single name would else be read as its letters)."""
        names = None if isinstance(topics, str | bytes) else list(topics)
        if names is None or not all(isinstance(t, str) for t in names):
            raise InvalidArgument(f"budget_use takes a list of topic names, not {topics!r:.80}")
        names = list(dict.fromkeys(names))
        layouts = yield from self._layouts_of(names)

        def budgets(pipe):
            for t in names:
                pipe.hmget(self.keys(t).config, ["max_messages", "max_bytes"])
        limits = {t: (int(m or 0) or None, int(b or 0) or None)
                  for t, (m, b) in zip(names, (yield pipeline(budgets)) if names else [], strict=True) if int(m or 0)
                  or int(b or 0)}
        if not limits:
            return {}
        slots = [(t, p) for t in limits for p in range(layouts[t].partitions)]

        def counts(pipe):
            for t, p in slots:
                pk = self.keys(t, p)
                pipe.hlen(pk.msgs)
                pipe.hexists(pk.msgs, HASHTABLE_FIELD)
                pipe.hget(pk.usage, "bytes")
        replies = yield pipeline(counts)
        held = yield from self._held_in(slots, (yield from self._server_ms()))
        unkept = [i for i, (t, _p) in enumerate(slots) if limits[t][1] and replies[3 * i + 2] is None]
        sampled = dict(zip(unkept, (yield pipeline(lambda pipe: [pipe.memory_usage(self.keys(*slots[i]).msgs,
                                                                                   samples=MEMORY_SAMPLES)
                                                                for i in unkept])) if unkept else [], strict=True))
        out = {}
        for t, (max_messages, max_bytes) in limits.items():
            mine = [i for i, (topic, _p) in enumerate(slots) if topic == t]
            out[t] = BudgetUse(
                topic=t, partitions=layouts[t].partitions, max_messages=max_messages, max_bytes=max_bytes,
                partition_messages=tuple(replies[3 * i] - int(replies[3 * i + 1]) + held[i][0] for i in mine),
                partition_bytes=tuple(int(replies[3 * i + 2] or sampled.get(i) or 0) + held[i][1] for i in mine))
        return out

    budget_use = operation(_budget_use)
