"""Batches with callbacks: ``batch`` (a handle: ``with q.batch(...) as b: b.publish(...)``),
``seal_batch`` (lua/batch.lua), ``discard_batch``, ``batch_status`` and ``forward_batch_callbacks``.

The members are counted per group by the scripts that end them (ack, nack and the other paths to
a dead letter, cancel, delete, purge, expiry: lua/includes/batch.lua); the script that ends the
member deciding a callback writes it into the partition's outbox in that same call, and
``forward_batch_callbacks`` publishes it to its topic under a key made of the outbox entry, so
a forwarder killed between its publish and its removal of the entry publishes nothing twice."""

import base64
import inspect
import json
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import (
    Code,
    DelayTooLong,
    InvalidArgument,
    InvalidTopic,
    MessageNotFound,
    PayloadNotSerializable,
    PayloadTooLarge,
    QueueError,
    StateConflict,
)
from ..ids import new_id
from ..keys import (
    DEFAULT_GROUP,
    HELD_BASE,
    id_for_partition,
    is_bridge_topic,
    partition_of,
    ready_due_ms,
    validate_group,
    validate_topic,
)
from ..steps import cmd, operation, pipeline, script
from .base import batch_fired, to_bytes
from .publish import InternalKey, Publish

log = logging.getLogger(__name__)

KINDS = ("complete", "success", "dead")
# A batch's fields in each group's hash (includes/batch.lua BATCH_COUNTS): published, acked, dead,
# removed, when a member last ended, and when each callback fired. discard_batch drops them all.
COUNTS = ("n", "a", "d", "r", "t", *KINDS)
# A forwarded callback's key stays held this long after its message is done (dedup="unique_for"):
# a forwarder that died after its publish and before removing the outbox entry is caught by it.
CALLBACK_WINDOW_S = 7 * 86400
FORWARD_LIMIT = 100     # outbox entries read per partition per forward call
CALLBACK_MAX_BYTES = 65_536   # a callback payload's hard cap, whatever its topic allows
# A callback its topic refused for a reason that may pass (a layout changing, ...) is tried again
# this much later, behind the entries that can go now, so it never blocks the outbox's front.
RETRY_MS = 60_000
# Ids batch_next_due reads from the front of each state a member waits in to be claimed (ready,
# pending, retrying): it tells the batch page a batch waiting for its members' due time from one
# whose due members nobody ends, at O(DUE_SCAN) whatever the batch's or the group's size.
DUE_SCAN = 100
# Refusals no retry can mend: the entry moves to the batch's failed record (BatchGroupStatus.failed).
PERMANENT = (InvalidArgument, InvalidTopic, PayloadTooLarge, PayloadNotSerializable, DelayTooLong)


@dataclass(frozen=True)
class BatchGroupStatus:
    """One group's count of a batch: members published (``total``), ``acked``, ``dead``,
    ``removed`` (cancelled, deleted, purged or dropped on expiry) and ``pending`` (not ended yet);
    ``fired``: callback kind -> ms its rule held (whether or not the batch has that callback);
    ``unsent``: the kinds fired but not yet forwarded to their topic; ``failed``: kind -> why its
    topic refused it for good (the forwarder gave up on it; an event ``callback_failed`` says so);
    ``last_end_ms``: when a member last ended in this group (None: none has yet)."""

    group: str
    total: int
    acked: int
    dead: int
    removed: int
    fired: dict[str, int] = field(default_factory=dict)
    unsent: tuple[str, ...] = ()
    failed: dict[str, str] = field(default_factory=dict)
    last_end_ms: int | None = None   # when its last member ended (Redis ms); None: none has

    @property
    def pending(self) -> int:
        return max(0, self.total - self.acked - self.dead - self.removed)


@dataclass(frozen=True)
class BatchStatus:
    """A batch as stored: its partition, when it was opened and sealed (None: still open), the
    callbacks (kind -> (topic, payload bytes)), the group whose callbacks fire (None: each group's),
    and each group's count (``groups``; ``of(group)`` for one)."""

    id: str
    topic: str
    partition: int
    created_ms: int
    sealed_ms: int | None
    callbacks: dict[str, tuple[str, bytes]]
    group: str | None
    groups: dict[str, BatchGroupStatus]

    @property
    def sealed(self) -> bool:
        return self.sealed_ms is not None

    def of(self, group: str) -> BatchGroupStatus:
        return self.groups[group]


def _callback(kind: str, value) -> dict | None:
    """The stored form of ``on_<kind>=(topic, payload)``: the payload as text, or base64 for bytes
    that are not UTF-8."""
    if value is None:
        return None
    if not isinstance(value, tuple) or len(value) != 2:
        raise InvalidArgument(f"on_{kind} must be a (topic, payload) tuple, not {value!r}")
    topic, payload = value
    validate_topic(topic)
    if is_bridge_topic(topic):
        raise InvalidArgument(f"on_{kind} cannot publish to {topic!r}: only the Celery bridge writes celery.* topics")
    raw = to_bytes(payload)
    if len(raw) > CALLBACK_MAX_BYTES:
        raise PayloadTooLarge(f"on_{kind}'s payload is {len(raw):,} bytes; a callback carries at most "
                              f"{CALLBACK_MAX_BYTES:,} (publish the data elsewhere and name it in the callback)")
    try:
        return {"t": topic, "p": raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {"t": topic, "b": base64.b64encode(raw).decode()}


def callback_key(member: str) -> InternalKey:
    """The dedup key an outbox entry ("<batch>|<group>|<kind>") is published under: NUL-prefixed,
    so a publisher who knows the batch id cannot hold it first and suppress the callback."""
    batch_id, group, kind = member.split("|")
    return InternalKey(f"\0batch:{batch_id}:{group}:{kind}")


def _payload(cb: dict) -> bytes:
    return base64.b64decode(cb["b"]) if "b" in cb else cb["p"].encode("utf-8")


class Batch:
    """A batch of ``topic`` (``q.batch(...)``): ``with``/``async with`` opens it, and a block
    that ends without an exception seals it (one that raises leaves it open: ``seal()`` it, or
    let it be: only ``on_dead`` can fire while open). ``publish`` and ``publish_many`` take
    publish's arguments; on an AsyncDelayQueue every method returns a coroutine."""

    def __init__(self, queue, topic: str, definition: str, partition: int | None):
        self.queue, self.topic, self.id = queue, topic, None
        self._definition, self._partition = definition, partition

    @property
    def partition(self) -> int | None:
        return None if self.id is None else partition_of(self.id)

    def open(self) -> "Batch":
        """Store the batch (blocking client; ``async with`` does this on an AsyncDelayQueue)."""
        opened = self.queue.open_batch(self.topic, self._definition, partition=self._partition)
        if inspect.isawaitable(opened):
            opened.close()
            raise InvalidArgument("on an AsyncDelayQueue a batch opens with `async with q.batch(...) as b`")
        self.id = opened
        return self

    def publish(self, payload: Any, **kwargs):
        if self.id is None:
            raise StateConflict("open the batch first: with q.batch(...) as b, or b.open()")
        return self.queue.publish(self.topic, payload, batch=self.id, **kwargs)

    def publish_many(self, payloads, **kwargs):
        if self.id is None:
            raise StateConflict("open the batch first: with q.batch(...) as b, or b.open()")
        return self.queue.publish_many(self.topic, payloads, batch=self.id, **kwargs)

    def seal(self):
        return self.queue.seal_batch(self.topic, self.id)

    def status(self):
        return self.queue.batch_status(self.topic, self.id)

    def discard(self):
        """Drop the batch's record now (discard_batch): its members stay, in no batch."""
        return self.queue.discard_batch(self.topic, self.id)

    def __enter__(self) -> "Batch":
        self.open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.seal()

    async def __aenter__(self) -> "Batch":
        self.id = await self.queue.open_batch(self.topic, self._definition, partition=self._partition)
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.seal()


class Batches(Publish):
    """batch, open_batch, seal_batch, discard_batch, batch_status, batch_of, batch_members, batch_next_due,
    forward_batch_callbacks."""

    def batch(self, topic: str, *, on_complete: tuple[str, Any] | None = None,
              on_success: tuple[str, Any] | None = None, on_dead: tuple[str, Any] | None = None,
              group: str | None = None, partition: int | None = None) -> Batch:
        """A batch of ``topic`` whose callbacks, each ``(topic, payload)``, are published once per
        group (or for ``group`` alone): ``on_dead`` when the first member becomes a dead letter,
        ``on_complete`` when every member ended (acked, dead or removed) after the seal,
        ``on_success`` when every member is acked after the seal (a dead member replayed and
        acked counts, so it may come after complete). All members go to one partition
        (``partition``, else one picked like a spread publish): docs/design.md "Batches".
        No I/O here: the ``with`` block (or ``open()``) opens it and sets ``id``."""
        validate_topic(topic)
        if group is not None:
            validate_group(group)
        callbacks = {k: _callback(k, v) for k, v in
                     (("complete", on_complete), ("success", on_success), ("dead", on_dead))}
        definition = json.dumps({**{k: v for k, v in callbacks.items() if v}, "group": group or ""},
                                separators=(",", ":"))
        return Batch(self, topic, definition, partition)

    def _open_batch(self, topic: str, definition: str, *, partition: int | None = None):
        """Store a batch's callbacks (JSON, as batch() builds them) before its first member is
        published; returns the new batch's id, which names its partition as a message id does."""
        parsed = json.loads(definition)
        for kind, cb in parsed.items():   # refused now, not when it fires
            if isinstance(cb, dict):
                cap = (yield from self._topic_config(cb["t"])).max_payload_bytes
                if len(_payload(cb)) > cap:
                    raise PayloadTooLarge(f"on_{kind}'s payload is {len(_payload(cb)):,} bytes; its topic "
                                          f"{cb['t']!r} takes at most {cap:,}")
        layout = yield from self._layout(topic)
        if parsed.get("group") and parsed["group"] not in layout.groups:   # its callbacks would never fire
            raise InvalidArgument(f"topic {topic!r} has no consumer group {parsed['group']!r} "
                                  f"(its groups: {', '.join(layout.groups)})")
        p = self._router.partition(topic, layout, partition=partition)
        batch_id = id_for_partition(new_id(), p)
        yield from self._register(topic)
        pk = self.keys(topic, p).p
        now_ms = yield from self._server_ms()
        # One MULTI: a client gone mid-open leaves no definition without its index entry (which
        # batch_trim walks), and nothing of an existing batch is overwritten.
        created, *_ = yield pipeline(lambda pipe: (pipe.hsetnx(pk.batches, f"{batch_id}|cb", definition),
                                                   pipe.hsetnx(pk.batches, f"{batch_id}|c", now_ms),
                                                   pipe.zadd(pk.batch_index, {batch_id: now_ms}, nx=True)),
                                     transaction=True)
        if not created:
            raise StateConflict(f"batch {batch_id} of topic {topic!r} exists already")
        return batch_id

    open_batch = operation(_open_batch)

    def _seal_batch(self, topic: str, batch_id: str):
        """Seal a batch (lua/batch.lua): it completes when its last member ends, or now when all
        have; the callbacks that fire now are forwarded before this returns. Returns the status."""
        p = partition_of(batch_id)
        for attempt in range(4):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            reply = yield script(self.scripts.batch, self._publish_keys(topic, layout, p),
                                 [layout.signature, batch_id])
            code = int(reply[0])
            if code == Code.STALE_LAYOUT:
                self._layouts.drop(topic)
                continue
            if code == Code.NOT_FOUND:
                raise MessageNotFound(f"topic {topic!r} has no batch {batch_id} (open it first)")
            if code == Code.STATE_CONFLICT:
                raise StateConflict(f"batch {batch_id} of topic {topic!r} is sealed already")
            fired: set = set()
            batch_fired(reply, (topic, p), fired)
            yield from self._forward_fired(fired)
            return (yield from self._batch_status(topic, batch_id))
        raise StateConflict(f"topic {topic!r} changed its layout four times during the seal of batch {batch_id}")

    seal_batch = operation(_seal_batch)

    def _discard_batch(self, topic: str, batch_id: str):
        """Drop a batch's record now (definition, counts, index entry, callbacks not yet
        forwarded or given up), sealed or not: its members stay, as messages of no batch, and no
        callback of it fires any more. MessageNotFound when there is no such batch. The definition
        goes first: every script that counts a member or fires a callback checks it
        (includes/batch.lua), so nothing is counted into the fields removed after it."""
        p = partition_of(batch_id)
        layout = yield from self._layout(topic)
        pk = self.keys(topic, p).p
        counts = [f"{batch_id}|{c}" for c in COUNTS]
        entries = [f"{batch_id}|{g}|{k}" for g in layout.groups for k in KINDS]

        def fill(pipe):
            pipe.hdel(pk.batches, f"{batch_id}|cb")
            pipe.hdel(pk.batches, f"{batch_id}|c", f"{batch_id}|s",
                      *(f"{batch_id}|x|{g}|{k}" for g in layout.groups for k in KINDS))
            for g in layout.groups:
                pipe.hdel(self.keys(topic, p, g).g.batches, *counts)
            pipe.zrem(pk.batch_outbox, *entries)
            pipe.zrem(pk.batch_index, batch_id)
        gone, *_ = yield pipeline(fill, transaction=True)
        if not gone:
            raise MessageNotFound(f"topic {topic!r} has no batch {batch_id}")

    discard_batch = operation(_discard_batch)

    def _batch_status(self, topic: str, batch_id: str):
        """A batch's BatchStatus: one round trip. MessageNotFound when there is no such batch."""
        p = partition_of(batch_id)
        layout = yield from self._layout(topic)
        pk = self.keys(topic, p).p
        gks = [self.keys(topic, p, g).g for g in layout.groups]
        outbox = [f"{batch_id}|{g}|{k}" for g in layout.groups for k in KINDS]
        counts = COUNTS
        failed = [f"{batch_id}|x|{g}|{k}" for g in layout.groups for k in KINDS]

        def fill(pipe):
            pipe.hmget(pk.batches, [f"{batch_id}|cb", f"{batch_id}|c", f"{batch_id}|s", *failed])
            for gk in gks:
                pipe.hmget(gk.batches, [f"{batch_id}|{c}" for c in counts])
            for m in outbox:
                pipe.zscore(pk.batch_outbox, m)

        replies = yield pipeline(fill)
        (cb, created, sealed, *gave_up), rows, scores = replies[0], replies[1:1 + len(gks)], replies[1 + len(gks):]
        if cb is None:
            raise MessageNotFound(f"topic {topic!r} has no batch {batch_id}")
        definition = json.loads(cb)
        groups = {}
        for gi, (g, row) in enumerate(zip(layout.groups, rows, strict=True)):
            n, a, d, r, last_end, *fired = (int(v) if v is not None else None for v in row)
            unsent = tuple(k for ki, k in enumerate(KINDS) if scores[gi * len(KINDS) + ki] is not None)
            why = {k: json.loads(raw)["error"] for k, raw in zip(KINDS, gave_up[gi * len(KINDS):], strict=False)
                   if raw is not None}
            groups[g] = BatchGroupStatus(g, n or 0, a or 0, d or 0, r or 0,
                                         {k: ms for k, ms in zip(KINDS, fired, strict=True) if ms is not None}, unsent,
                                         why, last_end)
        return BatchStatus(batch_id, topic, p, int(created or 0), int(sealed) if sealed is not None else None,
                           {k: (definition[k]["t"], _payload(definition[k])) for k in KINDS if k in definition},
                           definition.get("group") or None, groups)

    batch_status = operation(_batch_status)

    def _batch_of(self, topic: str, msg_id: str):
        """The id of the batch ``msg_id`` is a member of, or None (no batch, or its payload is
        gone). One round trip."""
        raw = yield cmd("hget", self.keys(topic, partition_of(msg_id)).p.batch_of, msg_id)
        return raw.decode() if isinstance(raw, bytes) else raw

    batch_of = operation(_batch_of)

    def _batch_members(self, topic: str, batch_id: str, ids: list[str]):
        """Those of ``ids`` (messages still stored) that are members of ``batch_id``, in order.
        One round trip: an HMGET in the batch's partition (members live nowhere else)."""
        if not ids:
            return []
        raws = yield cmd("hmget", self.keys(topic, partition_of(batch_id)).p.batch_of, ids)
        want = batch_id.encode()
        return [i for i, raw in zip(ids, raws, strict=True) if raw in (want, batch_id)]

    batch_members = operation(_batch_members)

    def _batch_next_due(self, topic: str, batch_id: str, *, group: str = DEFAULT_GROUP, limit: int = DUE_SCAN):
        """When the first of a batch's members waiting to be claimed in ``group`` is (or was) due,
        in Redis ms: the earliest due time of the members among the first ``limit`` of the group's
        ready, pending (delayed) and retrying messages in the batch's partition; a state holding
        more than those, with no member among them, counts with its ``limit``-th due time (its
        members come at or after it). None when no member waits in them (all in flight, held in an
        ordered line, waiting for a parent, or ended). Two round trips of O(limit) each."""
        validate_group(group)
        gk = self.keys(topic, partition_of(batch_id), group).g
        fronts = yield pipeline(lambda pipe: (
            pipe.zrange(gk.ready, 0, limit - 1, withscores=True),
            pipe.zrangebyscore(gk.pending, "-inf", f"({HELD_BASE}", start=0, num=limit, withscores=True),
            pipe.zrange(gk.retrying, 0, limit - 1, withscores=True)))
        # A ready score is the due time less the priority's minutes (keys.ready_due_ms): the due time
        # of a ready message further on is at least its score.
        due = [{(m.decode() if isinstance(m, bytes) else m): (ready_due_ms(sc) if state == 0 else sc)
                for m, sc in front} for state, front in enumerate(fronts)]
        members = set((yield from self._batch_members(topic, batch_id, [i for d in due for i in d])))
        times = []
        for d, front in zip(due, fronts, strict=True):
            mine = [ms for i, ms in d.items() if i in members]
            if mine:
                times.append(min(mine))
            elif len(front) == limit:
                times.append(int(front[-1][1]))
        return int(min(times)) if times else None

    batch_next_due = operation(_batch_next_due)

    def _forward_batch_callbacks(self, topic: str, *, partitions: list[int] | None = None,
                                 limit: int = FORWARD_LIMIT, entries: list[str] | None = None,
                                 budget_s: float | None = None, now_ms: int | None = None,
                                 partition_count: int | None = None):
        """Publish the callbacks fired in ``topic``'s partitions and not yet forwarded (at most
        ``limit`` per partition, those due: see RETRY_MS; or ``entries`` alone, outbox members of
        the one partition given, as a call that fired them passes), each keyed
        ``\\0batch:<id>:<group>:<kind>`` (callback_key) with a unique_for window, then drop it from the outbox.
        Workers call this with their heartbeat, stopping after ``budget_s`` seconds; ack and the
        other calls that fire one for their own. Returns how many were forwarded. A callback its
        topic refuses for good (too large, ...) moves to the batch's failed record; one refused
        for a passing reason is tried again RETRY_MS later. ``now_ms``: Redis's clock as the caller
        read it just before (a worker's heartbeat), instead of one more TIME; ``partition_count``:
        the topic's partitions as the caller last read them (a worker's fetcher), instead of one
        more layout read."""
        started = time.monotonic()
        if partitions is None:
            # From a random partition on: a keeper's time budget is spent on every partition in
            # turn, never on partition 0's backlog first, and workers forward different ones.
            n = partition_count or (yield from self._layout(topic)).partitions
            first = random.randrange(n)
            partitions = [(first + i) % n for i in range(n)]
        pks = [self.keys(topic, p).p for p in partitions]
        if entries is not None:
            scores = yield pipeline(lambda pipe: [pipe.zscore(pks[0].batch_outbox, e) for e in entries])
            pages = [[e for e, score in zip(entries, scores, strict=True) if score is not None]]
        else:
            if now_ms is None:
                now_ms = yield from self._server_ms()
            pages = yield pipeline(lambda pipe: [pipe.zrangebyscore(pk.batch_outbox, "-inf", now_ms, start=0, num=limit)
                                                 for pk in pks])
        sent = 0
        for p, pk, members in zip(partitions, pks, pages, strict=False):
            for raw in members:
                if budget_s is not None and time.monotonic() - started > budget_s:
                    return sent
                member = raw.decode() if isinstance(raw, bytes) else raw
                batch_id, group, kind = member.split("|")
                definition = yield cmd("hget", pk.batches, f"{batch_id}|cb")
                try:
                    cb = json.loads(definition or "{}").get(kind)
                except ValueError:
                    yield from self._callback_failed(topic, p, member, "its batch's definition is unreadable")
                    continue
                if cb is not None:
                    try:
                        yield from self._publish_one(
                            cb["t"], _payload(cb), key=callback_key(member), dedup="unique_for",
                            window=CALLBACK_WINDOW_S, headers={"delayq-batch": batch_id, "delayq-batch-topic": topic,
                                                               "delayq-batch-group": group, "delayq-batch-event": kind})
                    except PERMANENT as exc:
                        yield from self._callback_failed(topic, p, member, f"{cb['t']} refused it: {exc}")
                        continue
                    except QueueError as exc:
                        log.warning("batch %s of %s: the %s callback to %s was not published (%s); tried again "
                                    "in %d s", batch_id, topic, kind, cb["t"], exc, RETRY_MS // 1000)
                        now_ms = yield from self._server_ms()
                        yield cmd("zadd", pk.batch_outbox, {member: now_ms + RETRY_MS}, xx=True)
                        continue
                yield cmd("zrem", pk.batch_outbox, member)
                sent += 1
        return sent

    forward_batch_callbacks = operation(_forward_batch_callbacks)

    def _callback_failed(self, topic: str, p: int, member: str, error: str):
        """Move outbox entry ``member`` to its batch's failed record ("<b>|x|<group>|<kind>": ms and
        why, shown by batch_status and the batch page) and write a ``callback_failed`` event, in one
        MULTI: a callback that can never be published no longer holds the outbox's front."""
        batch_id, group, kind = member.split("|")
        log.warning("batch %s of %s: the %s callback of group %s is given up: %s", batch_id, topic, kind, group, error)
        k = self.keys(topic, p)
        cfg = yield from self._topic_config(topic)
        now_ms = yield from self._server_ms()

        def fill(pipe):
            pipe.zrem(k.p.batch_outbox, member)
            pipe.hset(k.p.batches, f"{batch_id}|x|{group}|{kind}", json.dumps({"ms": now_ms, "error": error[:500]}))
            if cfg.events:
                pipe.xadd(k.events, {"e": "callback_failed", "g": group, "ts": now_ms, "n": 1, "ids": batch_id,
                                     "actor": self.actor, "reason": f"{kind}: {error[:500]}"},
                          maxlen=cfg.events_maxlen, approximate=True)
        yield pipeline(fill, transaction=True)
