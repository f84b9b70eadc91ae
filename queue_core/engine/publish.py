"""Publishing: ``publish`` and ``publish_many`` (lua/publish.lua). A message is routed to a partition
(by its ordering or dedup key, spread evenly otherwise) and stored once per partition for every
group of the topic; script calls carry 250 messages and go 4 to a round trip."""

import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ..config import budget_share, check_fairness_key
from ..errors import Code, InvalidArgument, MessageNotFound, StateConflict, raise_for_code, raise_topic_full
from ..ids import new_ids
from ..indexes import HashBlock, declared, entries_args, parse_json
from ..keys import (
    DEFAULT_GROUP,
    HASHTABLE_FIELD,
    MAX_CHILDREN,
    MAX_PRIORITY,
    MEMORY_SAMPLES,
    RECORD_OVERHEAD_BYTES,
    id_for_partition,
    partition_of,
    validate_group,
)
from ..publish_entries import hashed_entries
from ..scripts import pipeline_steps
from ..steps import operation, pipeline, script
from .base import EngineBase, as_seconds, as_text, to_bytes
from .dedup import PublishResult, key_rule

PUBLISH_BATCH = 250      # messages per publish script call (a few ms each)
PIPELINE_DEPTH = 4       # publish script calls per round trip
MAX_ORDER_KEY = 256


def _check_order_key(order_key: str | None) -> str:
    if order_key is None:
        return ""
    if not isinstance(order_key, str) or not order_key or len(order_key) > MAX_ORDER_KEY \
            or any(ord(c) < 32 for c in order_key):
        raise InvalidArgument(f"order_key must be a non-empty string of at most {MAX_ORDER_KEY} characters "
                              f"without control characters (got {order_key!r})")
    return order_key


def _check_priority(priority) -> str:
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"priority must be a whole number from 0 to {MAX_PRIORITY} (higher is claimed first "
                              f"among due messages; default 0), not {priority!r}")
    return str(priority)


def _check_after(after, group: str, at, order_key, partition) -> int:
    """The partition a message published with ``after=`` goes to: its parent's."""
    if not isinstance(after, str) or not after or len(after) > 64 or "|" in after:
        raise InvalidArgument(f"after must be the id of a message of this topic, not {after!r}")
    validate_group(group)
    if at is not None:
        raise InvalidArgument("after= counts its delay from the parent's ack: give delay=, not at=")
    if order_key is not None:
        raise InvalidArgument("a message published with after= takes no order_key: its parent's ack orders it")
    home = partition_of(after)
    if partition is not None and partition != home:
        raise InvalidArgument(f"a message published with after= lives in its parent's partition ({home}), "
                              f"not {partition}")
    return home


class InternalKey(str):
    """A dedup key delayq's own code publishes under (a batch callback's, engine/batch.py): it
    starts with NUL, which publish refuses in a user's key, so no publisher can take it first."""


def check_member(batch, after, partition) -> int:
    """The partition a member of ``batch`` goes to: the batch's (every member in one partition, so
    the scripts that end members count them where the batch lives; docs/design.md "Batches")."""
    if not isinstance(batch, str) or not batch or len(batch) > 64 or "|" in batch:
        raise InvalidArgument(f"batch must be the id of an open batch (q.batch(...).id), not {batch!r}")
    if after is not None:
        raise InvalidArgument("a member of a batch cannot be published with after=: it lives in the batch's "
                              "partition, a chained message in its parent's")
    home = partition_of(batch)
    if partition is not None and partition != home:
        raise InvalidArgument(f"the members of batch {batch} live in its partition ({home}), not {partition}")
    return home


def _refuse_member(topic: str, what: str, batch: str) -> None:
    if what == "batch":
        raise MessageNotFound(f"topic {topic!r} has no batch {batch} (open it with q.batch(); a batch of another "
                              "topic, or one trimmed, takes no members): nothing was published")
    raise StateConflict(f"batch {batch} of topic {topic!r} is sealed: it takes no more members (its complete "
                        "callback may have fired); nothing was published")


def _refuse_after(topic: str, what: str, name: str, mode: str) -> None:
    group, _, parent = mode.removeprefix("after|").partition("|")
    if what == "group":
        raise InvalidArgument(f"topic {topic!r} has no consumer group {name!r} to wait in (after={parent!r})")
    if what == "parent":
        raise MessageNotFound(f"message {name} is not in group {group!r} of topic {topic!r} (acked already, "
                              "removed, or never published): nothing would release this message; publish "
                              "it without after=")
    raise StateConflict(f"{name} messages already wait for {parent} in group {group!r}, and at most 100 may; "
                        "nothing was published")


class Publish(EngineBase):
    """publish and publish_many."""

    def _publish_one(self, topic: str, payload: Any, *, delay: float | timedelta = 0, at: datetime | None = None,
                     key: str | None = None, headers: dict | None = None, max_attempts: int | None = None,
                     strict: bool = False, actor: str | None = None, order_key: str | None = None,
                     ttl: float | timedelta | None = None, partition: int | None = None,
                     fairness_key: str | None = None, priority: int = 0, dedup: str | None = None,
                     window: float | timedelta | None = None, after: str | None = None,
                     group: str = DEFAULT_GROUP, batch: str | None = None):
        """Publish one message to every group of the topic; returns its id, a PublishResult (a
        ``str``) whose ``outcome`` says what happened: published, duplicate, throttled, debounced.

        ``key``: publishing is idempotent while a message with that key exists (its id is
        returned), or raises DuplicateMessage when ``strict``. ``dedup`` widens that (a key is held
        while its message exists or its window is open): ``"unique_for"`` keeps the key ``window``
        seconds after the message is done (acked, cancelled, deleted or evicted; a dead letter
        still holds it); ``"throttle"`` holds it ``window`` seconds from the accepted publish;
        ``"debounce"`` gives the key's message this payload and a due time of ``delay`` from now
        while no group has started it (includes/dedup.lua). ``order_key``: in an ordered group,
        messages sharing it are handled one at a time in publish order. Both route the message to
        a partition by a stable hash (the ordering key wins when both are given, so the dedup key
        is then unique within that partition). ``ttl`` (seconds from now): not delivered again
        once it runs out. ``partition`` picks one explicitly. ``fairness_key`` (1-256 bytes): groups
        take turns between the keys of their ready messages and apply per-key limits;
        ``priority`` 0-9: higher is claimed first among what is due (GroupConfig, docs/dispatch.md).

        ``after`` (a message id of this topic): the message waits ("waiting for <id>") until
        ``group`` acks that message, then is due ``delay`` seconds after the ack; it lives in its
        parent's partition and is delivered to ``group`` alone. A parent that goes dead keeps it
        waiting (replay the parent); a parent cancelled, deleted or evicted makes it a dead letter
        (ParentGone). At most 100 messages wait on one parent (includes/chain.lua).

        ``batch``: the id of an open batch of this topic (``q.batch()``; its handle's ``publish``
        passes it): the message is counted in it and goes to the batch's partition."""
        rule = key_rule(key, strict, dedup, window)
        ids = yield from self._publish(topic, [to_bytes(payload)], delay, at, key, headers, max_attempts, rule,
                                       actor, order_key, ttl, partition, fairness_key, priority, after, group,
                                       batch, objects=[payload])
        return ids[0] if isinstance(ids[0], PublishResult) else PublishResult(ids[0])

    publish = operation(_publish_one, "publish")

    def _publish_many(self, topic: str, payloads: Iterable[Any], *, delay: float | timedelta = 0,
                      at: datetime | None = None, headers: dict | None = None, max_attempts: int | None = None,
                      actor: str | None = None, order_key: str | None = None, ttl: float | timedelta | None = None,
                      partition: int | None = None, fairness_key: str | None = None, priority: int = 0,
                      after: str | None = None, group: str = DEFAULT_GROUP, batch: str | None = None):
        """Publish many messages, spread evenly over the partitions (unless ``order_key`` or
        ``partition`` names one, or ``after`` a parent, as in publish): script calls of 250 (a few
        ms each), sent 4 to a round trip.
        Sizes are checked against the topic's cap before anything is sent, so an oversized payload
        refuses the whole call."""
        payloads = list(payloads)
        items = [to_bytes(p) for p in payloads]
        # Several script calls (more than one batch, or more than one partition) cannot refuse the
        # whole call atomically, so the sizes are checked here first (and the budget in _publish,
        # with the same configuration: one read).
        cfg = None
        if len(items) > PUBLISH_BATCH or (partition is None and order_key is None and after is None and batch is None
                                          and (yield from self._layout(topic)).partitions > 1):
            cfg = yield from self._topic_config(topic)
            cap = cfg.max_payload_bytes
            for i, item in enumerate(items):
                if len(item) > cap:
                    raise_for_code(Code.PAYLOAD_TOO_LARGE, topic,
                                   f"{len(item):,} bytes (message {i + 1} of the batch) > {cap:,} bytes")
        return (yield from self._publish(topic, items, delay, at, None, headers, max_attempts, False, actor,
                                         order_key, ttl, partition, fairness_key, priority, after, group, batch, cfg,
                                         objects=payloads))

    publish_many = operation(_publish_many)

    def _publish(self, topic, items, delay, at, key, headers, max_attempts, strict, actor, order_key, ttl,
                 partition, fairness_key=None, priority=0, after=None, group=DEFAULT_GROUP, batch=None, cfg=None,
                 objects=None):
        if max_attempts is not None and max_attempts < 1:
            raise InvalidArgument("max_attempts must be at least 1")
        if batch is not None:
            partition = check_member(batch, after, partition)
        if key is not None and (not isinstance(key, str) or ("\0" in key and not isinstance(key, InternalKey))):
            raise InvalidArgument(f"key must be a string without NUL characters, not {key!r}")
        if after is not None:
            partition = _check_after(after, group, at, order_key, partition)
            if len(items) > MAX_CHILDREN:
                # Several script calls could not refuse the whole call at once (the cap is per parent).
                raise InvalidArgument(f"at most {MAX_CHILDREN} messages wait on one parent; this call has {len(items)}")
            if isinstance(strict, str) and "|debounce|" in strict:
                raise InvalidArgument("dedup='debounce' cannot be combined with after=: a debounced message is due "
                                      "from each publish, a chained one from its parent's ack")
        okey = _check_order_key(order_key)
        fkey = check_fairness_key(fairness_key) if fairness_key is not None else ""
        prio = _check_priority(priority)
        due = self._due_args(delay, at)
        if after is not None:   # the delay counts from the parent's ack (includes/chain.lua)
            due = [f"after|{group}|{after}", due[1]]
        ttl_ms = 0
        if ttl is not None:
            ttl_ms = int(as_seconds(ttl, "ttl") * 1000)
            if ttl_ms <= 0:
                raise InvalidArgument("ttl must be positive (omit it for no TTL)")
            if due[0] == "delay" and ttl_ms <= due[1]:
                raise InvalidArgument(f"ttl ({ttl_ms / 1000:g} s) must be longer than the delay "
                                      f"({due[1] / 1000:g} s): the message would expire before it is due")
        header_json = ""
        if headers:
            try:
                header_json = json.dumps(headers, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"headers must be JSON-serialisable: {exc}") from exc
        # The headers as the record keeps them (a tuple is a list there, keys are text): what an
        # indexed header field's entries are computed from.
        stored_headers = parse_json(header_json) if header_json else None
        # strict: a bool, or publish_one's whole key rule (engine/dedup.py key_rule).
        rule = strict if isinstance(strict, str) else "1" if strict else "0"
        head = [*due, actor or self.actor, rule, ttl_ms, key or "", okey, header_json,
                max_attempts or 0, fkey, prio]
        # The header publish.lua writes before each payload (includes/record.lua header_string; its
        # creation ms has 13 digits until 2286): what the budget pre-check counts per record.
        fixed = "".join((key or "", okey, header_json)).encode()
        header_bytes = len(f"{0:013d}|{max_attempts or ''}|{ttl_ms or ''}|{len((key or '').encode())}|"
                           f"{len(okey.encode())}|{len(header_json.encode())}|") + len(fixed)
        tail = [batch or ""]
        yield from self._register(topic)
        results: list[str | None] = [None] * len(items)
        todo = list(range(len(items)))
        for attempt in range(4):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            # The indexed fields' entries of every message, before anything is written: a message
            # with too many is refused whole, as an oversized payload is.
            texts = hashed_entries(topic, declared(layout), items, todo, stored_headers, objects)
            if batch is not None and (key or order_key or fairness_key):
                self._check_member_key(topic, layout, partition, key, order_key, fairness_key)
            by_partition: dict[int, list[int]] = {}
            if (key is not None or order_key is not None or partition is not None or fairness_key is not None
                    or layout.partitions == 1):
                p = self._router.partition(topic, layout, key=key, order_key=order_key, partition=partition,
                                           fairness_key=fairness_key)
                by_partition[p] = todo
            else:
                # Spread evenly: consecutive runs of the batch go to consecutive partitions.
                start = self._router.spread(topic)
                size = -(-len(todo) // layout.partitions)
                for n, i in enumerate(range(0, len(todo), max(1, min(size, PUBLISH_BATCH)))):
                    by_partition.setdefault((start + n) % layout.partitions, []).extend(
                        todo[i:i + max(1, min(size, PUBLISH_BATCH))])
            if attempt == 0 and (len(by_partition) > 1 or len(todo) > PUBLISH_BATCH):
                # Several script calls cannot refuse the whole call at once: check the budget first.
                yield from self._check_budget(topic, layout, by_partition, items, cfg, header_bytes)
            stale: list[int] = []
            for p, indexes in by_partition.items():
                stale += yield from self._publish_partition(topic, layout, p, indexes, items, head, results,
                                                            keyed=key is not None, texts=texts, tail=tail)
            if not stale:
                return results  # type: ignore[return-value]
            todo = stale
        raise StateConflict(f"topic {topic!r} changed its layout (partitions or groups) during the publish four "
                            "times in a row; nothing of the refused part was written. Try again.")

    def _check_budget(self, topic, layout, by_partition, items, cfg=None, header_bytes=0):
        """Refuse (TopicFull) a publish of several script calls that some partition's share of the
        budget could not take, before any call is sent. It counts as includes/budget.lua does: the
        stored messages and the exact byte count of each store (MEMORY USAGE where the count is not
        kept yet), plus what is held for undo; each record costs its id, header, payload and
        RECORD_OVERHEAD_BYTES. Each call checks again: a concurrent publisher filling the share in
        between makes a later call refuse after earlier ones were written; the TopicFull then
        carries their ids (``published``). ``cfg``: the topic's configuration when the caller has
        read it already."""
        cfg = cfg or (yield from self._topic_config(topic))
        if not (cfg.max_messages or cfg.max_bytes):
            return
        parts = list(by_partition)

        def fill(pipe):
            for p in parts:
                pk = self.keys(topic, p)
                pipe.hlen(pk.msgs)
                pipe.hexists(pk.msgs, HASHTABLE_FIELD)
                pipe.hget(pk.usage, "bytes")
                pipe.memory_usage(pk.msgs, samples=MEMORY_SAMPLES)
        replies = yield pipeline(fill)
        held = yield from self._held_by_partition(topic, layout.partitions, (yield from self._server_ms()))
        for i, p in enumerate(parts):
            count, marker, counted, sampled = replies[4 * i:4 * i + 4]
            adds = len(by_partition[p])
            id_bytes = len(id_for_partition(new_ids(1)[0], p))
            adding = sum(id_bytes + header_bytes + len(items[j]) + RECORD_OVERHEAD_BYTES for j in by_partition[p])
            stored = int(counted) if counted is not None else (sampled or 0)
            for budget, limit, used, add in (
                    ("messages", cfg.max_messages, count - int(marker) + held[p][0], adds),
                    ("bytes", cfg.max_bytes, stored + held[p][1], adding)):
                share = budget_share(limit, layout.partitions) if limit else 0
                if limit and used + add > share:
                    raise_topic_full(topic, p, [None, budget, used, add, share, limit])

    def _check_member_key(self, topic, layout, home, key, order_key, fairness_key) -> None:
        """A batch member's key routes where it would outside the batch, or it is refused: the
        messages of one key share a partition (dedup is per partition, order per key), and a
        member lives in its batch's (docs/design.md "Batches")."""
        p = self._router.partition(topic, layout, key=key, order_key=order_key, fairness_key=fairness_key)
        if p != home:
            name, value = next((n, v) for n, v in (("order_key", order_key), ("key", key),
                                                    ("fairness_key", fairness_key)) if v)
            raise InvalidArgument(f"{name}={value!r} routes to partition {p} of topic {topic!r}, but this batch's "
                                  f"members live in partition {home}: a key's messages share one partition "
                                  f"(dedup, order). Publish it outside the batch, or open the batch with "
                                  f"partition={p}")

    def _publish_partition(self, topic, layout, p, indexes, items, head, results, keyed=False, texts=None,
                           tail=("",)):
        """Publish items[indexes] to partition p, filling ``results`` (PublishResults when
        ``keyed``: the script then also says what it did); returns the indexes refused because
        the layout changed meanwhile (nothing of those was written). ``texts``: each item's index
        entries (hashed_entries), for a topic with indexed fields."""
        keys = self._publish_keys(topic, layout, p)
        calls: list[tuple[list[int], list]] = []
        for start in range(0, len(indexes), PUBLISH_BATCH):
            chunk = indexes[start:start + PUBLISH_BATCH]
            ids = [id_for_partition(base, p) for base in new_ids(len(chunk))]
            entries = entries_args(ids, _part(texts, chunk)) if texts is not None else ("",)
            args = [layout.signature, *head, layout.indexes, entries[0], *tail, *entries[1:]]
            for i, msg_id in zip(chunk, ids, strict=True):
                args += [msg_id, items[i]]
            calls.append((chunk, args))
        stale: list[int] = []
        full = None
        for group_start in range(0, len(calls), PIPELINE_DEPTH):
            batch = calls[group_start:group_start + PIPELINE_DEPTH]
            acked = None
            if (len(batch) == 1 and not self.wait_replicas) or self.cluster:
                # redis-py allows no EVALSHA in cluster pipelines: one call after another.
                replies = []
                for _, args in batch:
                    replies.append((yield script(self.scripts.publish, keys, args)))
            else:
                def fill(pipe, batch=batch):
                    for _, args in batch:
                        self.scripts.publish.add_to(pipe, keys, args)
                    if self.wait_replicas:
                        self._add_wait(pipe)
                replies = yield from pipeline_steps(fill, [self.scripts.publish] * len(batch))
                if self.wait_replicas:
                    acked = int(replies.pop())
            for (chunk, _), reply in zip(batch, replies, strict=True):
                code = int(reply[0])
                if code == Code.STALE_LAYOUT:
                    self._layouts.drop(topic)
                    stale += chunk
                    continue
                if code == Code.PAYLOAD_TOO_LARGE:
                    raise_for_code(code, topic, f"{int(reply[2]):,} bytes (message {chunk[int(reply[1])] + 1} of "
                                                f"the batch) > {int(reply[3]):,} bytes")
                if code == Code.DUPLICATE:
                    raise_for_code(code, topic, reply[1].decode())
                if code == Code.TOPIC_FULL:
                    full = reply   # after the other replies: calls after it in the pipeline may have written
                    continue
                if code in (Code.NOT_FOUND, Code.STATE_CONFLICT) and as_text(reply[1]) in ("batch", "sealed"):
                    _refuse_member(topic, as_text(reply[1]), tail[0])
                if code in (Code.NOT_FOUND, Code.STATE_CONFLICT):   # after=: lua/includes/chain.lua
                    _refuse_after(topic, as_text(reply[1]), as_text(reply[2]), head[0])
                if code == Code.DELAY_TOO_LONG:
                    raise_for_code(code, topic, f"{int(reply[1]) / 1000:,.0f} s > {int(reply[2]) / 1000:,.0f} s")
                if keyed:
                    results[chunk[0]] = PublishResult(reply[1].decode(), as_text(reply[2]))
                    continue
                for i, msg_id in zip(chunk, reply[1:], strict=True):
                    results[i] = msg_id.decode()
            written = [results[i] for chunk, _ in batch for i in chunk if results[i] is not None]
            if written:
                self._require_replicas(acked, f"publishing {len(written)} message(s) to {topic!r}", written)
            if full is not None:   # earlier calls of this publish (any partition) stay written: say which
                raise_topic_full(topic, p, full, published=[str(r) for r in results if r is not None])
        return stale


def _part(texts, chunk: list[int]):
    """The index entries (hashed_entries) of the messages ``chunk`` (increasing indexes): a run of
    a HashBlock stays one."""
    if type(texts) is HashBlock and chunk[-1] - chunk[0] == len(chunk) - 1:
        return texts.part(chunk[0], chunk[-1] + 1)
    return [texts[i] for i in chunk]
