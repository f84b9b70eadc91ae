"""DelayQueue: the commands. Every state change is one Lua script in lua/, named after the method
that calls it; configuration (topics, partitions, groups) lives in admin.py and the read side in
read.py.

Every call that acts on messages takes ``group=`` (default ``"default"``): groups are independent
consumers of the same messages. Calls on message ids find the partition from the id itself.
"""

import json
import os
import random
import socket
import time
import traceback as tb_module
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis

from . import connect
from .admin import TopicAdmin
from .errors import (
    Code,
    InvalidArgument,
    NotReplicated,
    PayloadNotSerializable,
    StateConflict,
    raise_for_code,
)
from .fingerprint import CORRUPT_FP, EXPIRED_FP, LEASE_EXPIRED_FP, fingerprint
from .ids import new_ids
from .keys import DEFAULT_GROUP, KeyCache, Keys, id_for_partition, partition_of, validate_group
from .layout import LayoutCache, Router, TopicLayout
from .message import Delivery, Message, ms_to_dt
from .read import QueueReader
from .scripts import Scripts, is_cluster, pipeline_steps
from .states import MessageState
from .steps import arun, cmd, operation, pipeline, run, script

MAX_ERROR_MESSAGE = 1024
MAX_TRACEBACK = 8 * 1024
MAX_ORDER_KEY = 256
# Batch sizes keep every script call to a few ms, so Redis is never blocked for long by delayq.
PUBLISH_BATCH = 250      # messages per publish script call
UPKEEP_LIMIT = 1000      # promotions / reaps per claim call (promotion is ~2 commands each)
OP_BATCH = 100           # ids per replay / cancel / delete script call
PIPELINE_DEPTH = 4       # publish script calls per round trip
LAYOUT_TTL = 2.0         # seconds a cached layout is trusted for reads (publish checks it anyway)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    deliveries: list[Delivery]
    now_ms: int          # Redis TIME when the script ran
    next_due_ms: int     # earliest moment something becomes actionable; -1 when nothing is scheduled
    paused: bool


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed delivery for nack_many: ``reject`` dead-letters at once, ``retry_in`` (seconds)
    overrides the policy's delay for this one retry."""

    delivery: Delivery
    error: BaseException | str | None = None
    retry_in: float | timedelta | None = None
    reject: bool = False


def _to_bytes(payload: Any) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, (bytearray, memoryview)):
        return bytes(payload)
    if isinstance(payload, str):
        return payload.encode("utf-8")
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise PayloadNotSerializable(
            f"payload of type {type(payload).__name__} is not bytes, str or JSON-serialisable ({exc}); "
            "serialise it yourself and publish bytes") from exc


def _seconds(value: float | timedelta, what: str) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise InvalidArgument(f"{what} cannot be negative (got {seconds} s)")
    return seconds


def _error_parts(error: BaseException | str | None) -> tuple[str, str, str]:
    if error is None:
        return "Nack", "", ""
    if isinstance(error, BaseException):
        etype = type(error).__qualname__
        message = str(error)
        tb = "".join(tb_module.format_exception(error)) if error.__traceback__ else ""
    else:
        etype, message, tb = "Error", str(error), ""
    # Keep the end of a long traceback: the frame that raised is what an operator needs.
    return etype[:200], message[:MAX_ERROR_MESSAGE], tb[-MAX_TRACEBACK:]


def _check_order_key(order_key: str | None) -> str:
    if order_key is None:
        return ""
    if not isinstance(order_key, str) or not order_key or len(order_key) > MAX_ORDER_KEY \
            or any(ord(c) < 32 for c in order_key):
        raise InvalidArgument(f"order_key must be a non-empty string of at most {MAX_ORDER_KEY} characters "
                              f"without control characters (got {order_key!r})")
    return order_key


class QueueEngine(TopicAdmin, QueueReader):
    """The operations of a Redis delay queue, written once (queue_core.steps) for two clients:
    DelayQueue (blocking) and queue_core.aio.AsyncDelayQueue (asyncio).

    ``actor`` names who acts (recorded in history and events); operator actions pass their own.

    ``wait_replicas``: every call that creates messages (publish, replay, replay_dead,
    replay_edited) returns only once that many replicas acknowledged its writes (Redis WAIT, at
    most ``wait_timeout`` seconds), else raises NotReplicated. Not on Redis Cluster.
    """

    def __init__(self, client: "redis.Redis", prefix: str = "dq", actor: str | None = None, *,
                 wait_replicas: int = 0, wait_timeout: float = connect.DEFAULT_WAIT_TIMEOUT):
        if not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise InvalidArgument(f"wait_replicas must be a whole number >= 0 (got {wait_replicas!r})")
        if wait_replicas and not 0 < wait_timeout <= 3600:
            raise InvalidArgument(f"wait_timeout must be between 0 and 3600 seconds (got {wait_timeout!r}); "
                                  "Redis's WAIT with no timeout would block the caller forever")
        self.redis = client
        self.prefix = prefix
        self.actor = actor or f"{socket.gethostname()}:{os.getpid()}"
        self.scripts = Scripts(client)
        self.cluster = is_cluster(client)
        self._keys = KeyCache(prefix)
        self._layouts = LayoutCache()
        self._router = Router()
        self._registered: set[str] = set()
        if wait_replicas and self.cluster:
            raise InvalidArgument("wait_replicas is not supported on Redis Cluster (a WAIT must follow the write on "
                                  "the same shard's connection); use a single master with replicas or Sentinel")
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout

    _asyncio = False   # which redis-py client from_url builds

    @classmethod
    def from_url(cls, url: str, prefix: str = "dq", actor: str | None = None, *, wait_replicas: int | None = None,
                 wait_timeout: float | None = None, tls: dict | None = None, **redis_kwargs):
        """``redis://``, ``rediss://`` or ``unix://`` URL; ``redis+cluster://host:port`` for Redis
        Cluster; ``redis+sentinel://host:port[,host:port...]/service[/db]`` for Sentinel (see
        queue_core.connect). ``wait_replicas``/``wait_timeout`` override the URL's options of the
        same names; ``tls`` holds TLS options from settings (queue_core.connect.tls_options)."""
        target = connect.parse(url)
        client = connect.connect(target, tls=tls, asyncio=cls._asyncio, **redis_kwargs)
        return cls(client, prefix=prefix, actor=actor,
                   wait_replicas=target.wait_replicas if wait_replicas is None else wait_replicas,
                   wait_timeout=target.wait_timeout if wait_timeout is None else wait_timeout)

    def _drive(self, steps):
        raise NotImplementedError   # DelayQueue runs operations to their result, AsyncDelayQueue awaits them

    # -- replica acknowledgement ---------------------------------------------------------------

    def _add_wait(self, pipe) -> None:
        # WAIT counts the writes of the connection it is sent on, so it rides in the same pipeline.
        pipe.execute_command("WAIT", self.wait_replicas, max(1, round(self.wait_timeout * 1000)))

    def _write(self, picker, keys: list, args: list):
        """A script call that creates messages: (its reply, replicas that acknowledged it, or None
        when not waiting). Check the count with _require_replicas once the reply is read."""
        if not self.wait_replicas:
            return (yield script(picker, keys, args)), None

        def fill(pipe):
            picker.add_to(pipe, keys, args)
            self._add_wait(pipe)
        reply, acked = yield from pipeline_steps(fill, [picker])
        return reply, int(acked)

    def _require_replicas(self, acked: int | None, what: str, ids: Sequence[str] = ()) -> None:
        if acked is None or acked >= self.wait_replicas:
            return
        raise NotReplicated(
            f"{what} reached the master but only {acked} of {self.wait_replicas} replica(s) acknowledged it within "
            f"{self.wait_timeout:g} s. It exists on the master and is handled as usual unless the master fails "
            "before its replicas catch up. Check the replicas (INFO replication); publishing again with the same "
            "key is safe", acked=acked, wanted=self.wait_replicas, ids=ids)

    # -- keys and layout -----------------------------------------------------------------------

    def keys(self, topic: str, partition: int = 0, group: str = DEFAULT_GROUP) -> Keys:
        """The keys of one partition and one group of ``topic`` (validates both names)."""
        return self._keys.get(topic, partition, group)

    def _layout(self, topic: str, *, fresh: bool = False):
        """The topic's partition count and groups. One round trip unless cached (2 s)."""
        now = time.monotonic()
        cached = None if fresh else self._layouts.get(topic, now, LAYOUT_TTL)
        if cached is not None:
            return cached
        layout = TopicLayout.parse((yield cmd("hget", self.keys(topic).config, "layout")))
        self._layouts.put(topic, layout, now)
        return layout

    layout = operation(_layout)

    def _layouts_of(self, topics: Iterable[str], *, fresh: bool = False):
        """The layouts of many topics: the cached ones (2 s) as they are unless ``fresh``, the rest
        in one pipelined round trip."""
        now = time.monotonic()
        found = {t: None if fresh else self._layouts.get(t, now, LAYOUT_TTL) for t in dict.fromkeys(topics)}
        missing = [t for t, layout in found.items() if layout is None]
        if missing:
            def fill(pipe):
                for t in missing:
                    pipe.hget(self.keys(t).config, "layout")
            for t, raw in zip(missing, (yield pipeline(fill)), strict=True):
                found[t] = TopicLayout.parse(raw)
                self._layouts.put(t, found[t], now)
        return found

    layouts = operation(_layouts_of, "layouts")

    def _group_keys(self, topic: str, group: str, partition: int) -> Keys:
        validate_group(group)
        return self.keys(topic, partition, group)

    def _register(self, topic: str, always: bool = False):
        # The registry lives outside the topic's hash tags, so it is written by a plain command rather
        # than inside a (single-slot) script. publish() writes it once per topic per process;
        # configuration calls (rare) always do, so a lost registry is rebuilt.
        if always or topic not in self._registered:
            yield cmd("sadd", self._registry_key(), topic)
            self._registered.add(topic)

    # -- publishing ----------------------------------------------------------------------------

    def _due_args(self, delay: float | timedelta, at: datetime | None) -> list:
        if at is not None:
            if delay:
                raise InvalidArgument("give either delay= or at=, not both")
            if at.tzinfo is None:
                raise InvalidArgument("at= must be timezone-aware (e.g. datetime.now(UTC) + ...); "
                                      "a naive datetime is ambiguous")
            return ["at", int(at.timestamp() * 1000)]
        return ["delay", int(_seconds(delay, "delay") * 1000)]

    def _publish_one(self, topic: str, payload: Any, *, delay: float | timedelta = 0, at: datetime | None = None,
                     key: str | None = None, headers: dict | None = None, max_attempts: int | None = None,
                     strict: bool = False, actor: str | None = None, order_key: str | None = None,
                     ttl: float | timedelta | None = None, partition: int | None = None):
        """Publish one message to every group of the topic; returns its id.

        ``key``: publishing is idempotent while a message with that key exists (its id is
        returned), or raises DuplicateMessage when ``strict``. ``order_key``: in an ordered group,
        messages sharing it are handled one at a time in publish order. Both route the message to
        a partition by a stable hash (the ordering key wins when both are given, so the dedup key
        is then unique within that partition). ``ttl`` (seconds from now): not delivered again
        once it runs out. ``partition`` picks one explicitly."""
        ids = yield from self._publish(topic, [_to_bytes(payload)], delay, at, key, headers, max_attempts, strict,
                                       actor, order_key, ttl, partition)
        return ids[0]

    publish = operation(_publish_one, "publish")

    def _publish_many(self, topic: str, payloads: Iterable[Any], *, delay: float | timedelta = 0,
                      at: datetime | None = None, headers: dict | None = None, max_attempts: int | None = None,
                      actor: str | None = None, order_key: str | None = None, ttl: float | timedelta | None = None,
                      partition: int | None = None):
        """Publish many messages, spread evenly over the partitions (unless ``order_key`` or
        ``partition`` names one): script calls of 250 (a few ms each), sent 4 to a round trip.
        Sizes are checked against the topic's cap before anything is sent, so an oversized payload
        refuses the whole call."""
        items = [_to_bytes(p) for p in payloads]
        # Several script calls (more than one batch, or more than one partition) cannot refuse the
        # whole call atomically, so the sizes are checked here first.
        if len(items) > PUBLISH_BATCH or (partition is None and order_key is None
                                          and (yield from self._layout(topic)).partitions > 1):
            cap = (yield from self._topic_config(topic)).max_payload_bytes
            for i, item in enumerate(items):
                if len(item) > cap:
                    raise_for_code(Code.PAYLOAD_TOO_LARGE, topic,
                                   f"{len(item):,} bytes (message {i + 1} of the batch) > {cap:,} bytes")
        return (yield from self._publish(topic, items, delay, at, None, headers, max_attempts, False, actor,
                                         order_key, ttl, partition))

    publish_many = operation(_publish_many)

    def _publish(self, topic, items, delay, at, key, headers, max_attempts, strict, actor, order_key, ttl,
                 partition):
        if max_attempts is not None and max_attempts < 1:
            raise InvalidArgument("max_attempts must be at least 1")
        okey = _check_order_key(order_key)
        due = self._due_args(delay, at)
        ttl_ms = 0
        if ttl is not None:
            ttl_ms = int(_seconds(ttl, "ttl") * 1000)
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
        head = [*due, actor or self.actor, "1" if strict else "0", ttl_ms, key or "", okey, header_json,
                max_attempts or 0]
        yield from self._register(topic)
        results: list[str | None] = [None] * len(items)
        todo = list(range(len(items)))
        for attempt in range(4):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            by_partition: dict[int, list[int]] = {}
            if key is not None or order_key is not None or partition is not None or layout.partitions == 1:
                p = self._router.partition(topic, layout, key=key, order_key=order_key, partition=partition)
                by_partition[p] = todo
            else:
                # Spread evenly: consecutive runs of the batch go to consecutive partitions.
                start = self._router.spread(topic)
                size = -(-len(todo) // layout.partitions)
                for n, i in enumerate(range(0, len(todo), max(1, min(size, PUBLISH_BATCH)))):
                    by_partition.setdefault((start + n) % layout.partitions, []).extend(
                        todo[i:i + max(1, min(size, PUBLISH_BATCH))])
            stale: list[int] = []
            for p, indexes in by_partition.items():
                stale += yield from self._publish_partition(topic, layout, p, indexes, items, head, results)
            if not stale:
                return results  # type: ignore[return-value]
            todo = stale
        raise StateConflict(f"topic {topic!r} changed its layout (partitions or groups) during the publish four "
                            "times in a row; nothing of the refused part was written. Try again.")

    def _publish_partition(self, topic, layout, p, indexes, items, head, results):
        """Publish items[indexes] to partition p, filling ``results``; returns the indexes refused
        because the layout changed meanwhile (nothing of those was written)."""
        keys = self._publish_keys(topic, layout, p)
        calls: list[tuple[list[int], list]] = []
        for start in range(0, len(indexes), PUBLISH_BATCH):
            chunk = indexes[start:start + PUBLISH_BATCH]
            args = [layout.signature, *head]
            for i, base in zip(chunk, new_ids(len(chunk)), strict=True):
                args += [id_for_partition(base, p), items[i]]
            calls.append((chunk, args))
        stale: list[int] = []
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
                if code == Code.DELAY_TOO_LONG:
                    raise_for_code(code, topic, f"{int(reply[1]) / 1000:,.0f} s > {int(reply[2]) / 1000:,.0f} s")
                for i, msg_id in zip(chunk, reply[1:], strict=True):
                    results[i] = msg_id.decode()
            written = [results[i] for chunk, _ in batch for i in chunk if results[i] is not None]
            if written:
                self._require_replicas(acked, f"publishing {len(written)} message(s) to {topic!r}", written)
        return stale

    def _publish_keys(self, topic: str, layout: TopicLayout, p: int) -> list[str]:
        k = self.keys(topic, p)
        keys = [getattr(k.p, n) for n in k.p.__slots__]
        for group in layout.groups:
            g = self.keys(topic, p, group).g
            keys += [getattr(g, n) for n in g.__slots__]
        return keys

    # -- consuming -----------------------------------------------------------------------------

    def _claim(self, topic: str, count: int = 1, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """Claim up to ``count`` due messages for ``group`` (oldest due first within a partition),
        with a fresh lease each, visiting the partitions in turn."""
        if count < 0:
            raise InvalidArgument("count cannot be negative")
        layout = yield from self._layout(topic)
        start = self._router.spread(f"claim:{topic}") if layout.partitions > 1 else 0
        out: list[Delivery] = []
        for n in range(layout.partitions):
            if count and len(out) >= count:
                break   # count 0 runs every partition's upkeep
            result = yield from self._claim_batch(topic, count - len(out), actor=actor, group=group,
                                                  partition=(start + n) % layout.partitions)
            out += result.deliveries
        return out

    claim = operation(_claim)

    def _claim_batch(self, topic: str, count: int = 1, *, actor: str | None = None, group: str = DEFAULT_GROUP,
                     partition: int = 0):
        """claim() from one partition, plus what a worker needs to sleep well: Redis's now and the
        next due time there. One script call."""
        if count < 0:
            raise InvalidArgument("count cannot be negative")
        k = self._group_keys(topic, group, partition)
        r = yield script(self.scripts.claim, k.as_list(), [count, random.random(), actor or self.actor, UPKEEP_LIMIT,
                                                          LEASE_EXPIRED_FP, CORRUPT_FP, group, EXPIRED_FP])
        now_ms, next_due, paused, n = int(r[0]), int(r[1]), bool(r[2]), int(r[3])
        deliveries = []
        if n:
            token, deadline = r[4].decode(), int(r[5])
            unacked = MessageState.unacked
            for i in range(6, 6 + n * 5, 5):
                msg_id, attempt, due, record, info = r[i:i + 5]
                # The script checked the record before claiming; header and payload are split only
                # when a handler asks for them.
                attempt, due = int(attempt), int(due)
                message = Message(msg_id.decode(), topic, None, unacked, group=group, partition=partition,
                                  record=record, info=info or None, attempts=attempt, score=deadline, due_ms=due)
                deliveries.append(Delivery(message, token, attempt, due, now_ms, deadline))
        return ClaimResult(deliveries, now_ms, next_due, paused)

    claim_batch = operation(_claim_batch)

    @staticmethod
    def _by_place(deliveries: Iterable[Delivery]) -> dict[tuple[str, int, str], list[Delivery]]:
        places: dict[tuple[str, int, str], list[Delivery]] = {}
        for d in deliveries:
            m = d.message
            place = (m.topic, m.partition, m.group)
            group = places.get(place)
            if group is None:
                places[place] = [d]
            else:
                group.append(d)
        return places

    def _ack(self, delivery: Delivery):
        """Acknowledge: the message is done in its group. LeaseLost if the lease is no longer held."""
        refused = yield from self._ack_many([delivery])
        if refused:
            raise_for_code(Code.LEASE_LOST, delivery.topic, delivery.id)

    ack = operation(_ack)

    def _ack_many(self, deliveries: Sequence[Delivery], *, actor: str | None = None):
        """Acknowledge many: one script call per (topic, partition, group), pipelined when there
        are several. Returns the deliveries refused for a lost lease."""
        places = self._by_place(deliveries)
        calls = []
        for (topic, partition, group), ds in places.items():
            args: list = [actor or self.actor, group]
            for d in ds:
                args += [d.id, d.token]
            calls.append((self.keys(topic, partition, group).as_list(), args, ds))
        refused: list[Delivery] = []
        for (_keys, _args, ds), codes in zip(calls, (yield from self._run_many(self.scripts.ack, calls)), strict=True):
            refused += [d for d, c in zip(ds, codes, strict=True) if int(c) != 0]
        return refused

    ack_many = operation(_ack_many)

    def _run_many(self, picker, calls: list[tuple]):
        if len(calls) == 1 or self.cluster:
            replies = []
            for keys, args, *_ in calls:
                replies.append((yield script(picker, keys, args)))
            return replies

        def fill(pipe):
            for keys, args, *_ in calls:
                picker.add_to(pipe, keys, args)
        return (yield from pipeline_steps(fill, [picker] * len(calls)))

    def _nack(self, delivery: Delivery, error: BaseException | str | None = None, *,
              retry_in: float | timedelta | None = None, actor: str | None = None):
        """The attempt failed: retry by the group's policy (``retry_in`` overrides this one delay)
        or dead-letter when attempts are exhausted (or the TTL ran out). Returns the new state."""
        return (yield from self._fail_one(Failure(delivery, error, retry_in, False), actor))

    nack = operation(_nack)

    def _reject(self, delivery: Delivery, error: BaseException | str | None = None, *,
                actor: str | None = None):
        """Dead-letter now, without retries (bad input that no retry can fix)."""
        return (yield from self._fail_one(Failure(delivery, error, None, True), actor))

    reject = operation(_reject)

    def _fail_one(self, failure: Failure, actor):
        result = (yield from self._nack_many([failure], actor=actor))[0]
        if result is None:
            raise_for_code(Code.LEASE_LOST, failure.delivery.topic, failure.delivery.id)
        return result

    def _nack_many(self, failures: Sequence[Failure], *, actor: str | None = None):
        """Fail many deliveries in one script call per (topic, partition, group); returns the new
        state of each, or None where the lease was lost."""
        places: dict[tuple[str, int, str], list[int]] = {}
        for i, f in enumerate(failures):
            places.setdefault((f.delivery.topic, f.delivery.partition, f.delivery.group), []).append(i)
        calls = []
        for (topic, partition, group), indexes in places.items():
            args: list = [random.random(), actor or self.actor, group, EXPIRED_FP]
            for i in indexes:
                f = failures[i]
                etype, message, tb = _error_parts(f.error)
                retry_ms = -1 if f.retry_in is None else int(_seconds(f.retry_in, "retry_in") * 1000)
                args += [f.delivery.id, f.delivery.token, etype, message, fingerprint(etype, message), tb, retry_ms,
                         "1" if f.reject else "0"]
            calls.append((self.keys(topic, partition, group).as_list(), args, indexes))
        out: list[MessageState | None] = [None] * len(failures)
        for (_k, _a, indexes), reply in zip(calls, (yield from self._run_many(self.scripts.nack, calls)), strict=True):
            for n, i in enumerate(indexes):
                state = reply[2 * n]
                out[i] = None if isinstance(state, int) else MessageState(state.decode())
        return out

    nack_many = operation(_nack_many)

    def _release(self, deliveries: Sequence[Delivery], *, actor: str | None = None):
        """Give back deliveries that were claimed but never handled (a stopping worker's
        prefetch): unacked -> ready at once, the attempt not counted. Returns how many."""
        calls = []
        for (topic, partition, group), ds in self._by_place(deliveries).items():
            args: list = [actor or self.actor, group]
            for d in ds:
                args += [d.id, d.token]
            calls.append((self.keys(topic, partition, group).as_list(), args, ds))
        replies = yield from self._run_many(self.scripts.release, calls)
        return sum(1 for codes in replies for c in codes if int(c) == 0)

    release = operation(_release)

    def _extend(self, delivery: Delivery, seconds: float | timedelta):
        """Extend the lease to Redis now + ``seconds``; returns the new deadline."""
        deadline = (yield from self._extend_many([delivery], seconds))[0]
        if deadline is None:
            raise_for_code(Code.LEASE_LOST, delivery.topic, delivery.id)
        return deadline

    extend = operation(_extend)

    def _extend_many(self, deliveries: Sequence[Delivery], seconds: float | timedelta):
        """Extend many leases (one script call per topic, partition and group); None where lost."""
        if not deliveries:
            return []
        ms = int(_seconds(seconds, "seconds") * 1000)
        index = {id(d): i for i, d in enumerate(deliveries)}
        out: list[datetime | None] = [None] * len(deliveries)
        calls = []
        for (topic, partition, group), ds in self._by_place(deliveries).items():
            args: list = [ms]
            for d in ds:
                args += [d.id, d.token]
            calls.append((self.keys(topic, partition, group).as_list(), args, ds))
        for (_k, _a, ds), reply in zip(calls, (yield from self._run_many(self.scripts.extend, calls)), strict=True):
            for d, v in zip(ds, reply[1:], strict=True):
                out[index[id(d)]] = ms_to_dt(int(v)) if int(v) >= 0 else None
        return out

    extend_many = operation(_extend_many)

    # -- operator actions ----------------------------------------------------------------------

    def _per_id(self, picker, topic: str, group: str, head_args: list, ids: Iterable[str], *,
                creates: str = ""):
        """Run ``script`` over ids, by partition (from each id) in batches of OP_BATCH; one code per
        id in the order given. Ids naming a partition the topic does not have are NOT_FOUND.
        ``creates`` (what the call does, for NotReplicated): the script makes messages deliverable,
        so each batch waits for replicas when wait_replicas is set."""
        ids = list(ids)
        layout = yield from self._layout(topic)
        by_partition: dict[int, list[int]] = {}
        codes = [int(Code.NOT_FOUND)] * len(ids)
        for i, msg_id in enumerate(ids):
            p = partition_of(msg_id)
            if p < layout.partitions:
                by_partition.setdefault(p, []).append(i)
        for p, indexes in by_partition.items():
            keys = self._group_keys(topic, group, p).as_list()
            for start in range(0, len(indexes), OP_BATCH):
                part = indexes[start:start + OP_BATCH]
                args = head_args + [ids[i] for i in part]
                if creates:
                    reply, acked = yield from self._write(picker, keys, args)
                else:
                    reply, acked = (yield script(picker, keys, args)), None
                for i, c in zip(part, reply, strict=True):
                    codes[i] = int(c)
                done = [ids[i] for i, c in zip(part, reply, strict=True) if int(c) == 0]
                if done:
                    self._require_replicas(acked, f"{creates} {len(done)} message(s) of {topic!r}", done)
        return codes

    def _deliver_now(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """pending or retrying -> ready now. StateConflict if it is in another state."""
        code = (yield from self._deliver_now_many(topic, [msg_id], actor=actor, group=group))[0]
        self._raise_state(code, topic, msg_id, "pending or retrying (and not held behind its ordering key)")

    deliver_now = operation(_deliver_now)

    def _deliver_now_many(self, topic: str, ids: Iterable[str], *, actor: str | None = None,
                          group: str = DEFAULT_GROUP):
        """deliver_now for many ids, one script call per 100; one code per id (0 moved,
        Code.NOT_FOUND, Code.STATE_CONFLICT)."""
        return (yield from self._per_id(self.scripts.deliver_now, topic, group, [actor or self.actor, group], ids))

    deliver_now_many = operation(_deliver_now_many)

    def _reschedule(self, topic: str, msg_id: str, *, delay: float | timedelta = 0, at: datetime | None = None,
                    actor: str | None = None, group: str = DEFAULT_GROUP,
                    states: Iterable[MessageState] = (MessageState.pending, MessageState.retrying)):
        """Give a pending or retrying message of ``group`` a new due time (``delay`` from now by
        Redis's clock, or ``at``); it stays in its state. StateConflict if it is in another state
        (or held behind its ordering key), MessageNotFound if gone, DelayTooLong past max_delay."""
        code = (yield from self._reschedule_many(topic, [msg_id], delay=delay, at=at, actor=actor, group=group,
                                                 states=states))[0]
        if code == Code.DELAY_TOO_LONG:
            raise_for_code(code, topic, f"message {msg_id}'s new due time")
        self._raise_state(code, topic, msg_id, " or ".join(MessageState(s).value for s in states)
                          + " (and not held behind its ordering key)")

    reschedule = operation(_reschedule)

    def _reschedule_many(self, topic: str, ids: Iterable[str], *, delay: float | timedelta = 0,
                         at: datetime | None = None, actor: str | None = None, group: str = DEFAULT_GROUP,
                         states: Iterable[MessageState] = (MessageState.pending, MessageState.retrying)):
        """reschedule for many ids, one script call per 100, compare-and-set on ``states``; one code
        per id (0 moved, Code.NOT_FOUND, Code.STATE_CONFLICT, Code.DELAY_TOO_LONG). One due time
        for all: Redis's clock at the call plus ``delay``, or ``at``."""
        kind, value = self._due_args(delay, at)
        due_ms = value if kind == "at" else (yield from self._server_ms()) + value
        allowed = ",".join(MessageState(s).value for s in states)
        return (yield from self._per_id(self.scripts.reschedule, topic, group,
                                        [actor or self.actor, group, due_ms, allowed], ids))

    reschedule_many = operation(_reschedule_many)

    def _kill(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """Move a retrying message of ``group`` to the dead-letter queue now, with its last error,
        instead of waiting for its remaining attempts. StateConflict if it is not retrying."""
        code = (yield from self._kill_many(topic, [msg_id], actor=actor, group=group))[0]
        self._raise_state(code, topic, msg_id, "retrying")

    kill = operation(_kill)

    def _kill_many(self, topic: str, ids: Iterable[str], *, actor: str | None = None,
                   group: str = DEFAULT_GROUP):
        """kill for many ids, one script call per 100; one code per id (0 moved, Code.NOT_FOUND,
        Code.STATE_CONFLICT)."""
        return (yield from self._per_id(self.scripts.kill, topic, group, [actor or self.actor, group, CORRUPT_FP],
                                        ids))

    kill_many = operation(_kill_many)

    def _cancel(self, topic: str, msg_id: str, *, actor: str | None = None, group: str = DEFAULT_GROUP,
                states: Iterable[MessageState] = (MessageState.pending, MessageState.ready,
                                                   MessageState.retrying)):
        """Remove a message from ``group`` that is not being worked on. StateConflict if it is
        unacked (or in a state outside ``states``), MessageNotFound if it is gone."""
        states = list(states)
        code = (yield from self._remove(topic, [msg_id], event="cancelled", states=states, actor=actor,
                                        group=group))[0]
        self._raise_state(code, topic, msg_id, " or ".join(MessageState(s).value for s in states))

    cancel = operation(_cancel)

    def _delete(self, topic: str, ids: Iterable[str], *, state: MessageState = MessageState.dead,
                actor: str | None = None, group: str = DEFAULT_GROUP):
        """Delete the given messages from ``group`` if they are still in ``state``; returns how many."""
        codes = yield from self._remove(topic, ids, event="deleted", states=[state], actor=actor, group=group)
        return sum(1 for c in codes if c == 0)

    delete = operation(_delete)

    def _remove(self, topic: str, ids: Iterable[str], *, event: str, states: Iterable[MessageState],
                actor: str | None = None, group: str = DEFAULT_GROUP):
        """Compare-and-set removal; one code per id (0 removed, Code.NOT_FOUND, Code.STATE_CONFLICT)."""
        allowed = ",".join(MessageState(s).value for s in states)
        return (yield from self._per_id(self.scripts.remove, topic, group,
                                        [event, allowed, actor or self.actor, group], ids))

    remove = operation(_remove)

    def _replay(self, topic: str, ids: Iterable[str], *, delay: float | timedelta = 0,
                actor: str | None = None, group: str = DEFAULT_GROUP):
        """dead -> ready (or pending after ``delay``) in ``group``, attempts reset. Ids no longer
        dead are skipped (compare-and-set), so replaying twice never delivers twice. Returns how
        many moved."""
        ms = int(_seconds(delay, "delay") * 1000)
        codes = yield from self._per_id(self.scripts.replay, topic, group, [ms, actor or self.actor, group], ids,
                                        creates="replaying")
        return sum(1 for c in codes if c == 0)

    replay = operation(_replay)

    def _replay_dead(self, topic: str, fingerprint: str | None = None, batch: int = 100, *,
                     delay: float | timedelta = 0, actor: str | None = None, progress=None,
                     since: datetime | None = None, until: datetime | None = None,
                     group: str = DEFAULT_GROUP):
        """Replay the whole dead-letter queue of ``group``, or one error group, in bounded batches
        (each one script call, ~3 ms for 100). Only letters dead when the call started (or before
        ``until``) and after ``since`` are taken. ``progress`` is called with the running total
        after each batch. Returns how many moved."""
        cutoff = (yield from self._server_ms()) if until is None else int(until.timestamp() * 1000)
        since_ms = 0 if since is None else int(since.timestamp() * 1000)
        total = 0
        while True:
            examined, moved = yield from self._replay_dead_batch(topic, fingerprint, cutoff=cutoff, since=since_ms,
                                                                 batch=batch, delay=delay, actor=actor, group=group)
            total += moved
            if progress:
                progress(total)
            if examined < batch:
                return total

    replay_dead = operation(_replay_dead)

    def _replay_dead_batch(self, topic: str, fingerprint: str | None, *, cutoff: int, since: int = 0,
                           batch: int = 100, delay: float | timedelta = 0, actor: str | None = None,
                           group: str = DEFAULT_GROUP):
        """One bounded batch of replay_dead over letters that died in [since, cutoff] (Redis ms),
        taken from the partitions in turn. Returns (examined, moved); fewer examined than
        ``batch`` means the range is done in every partition. Safe to repeat after a crash:
        replayed letters are no longer dead, so nothing moves twice."""
        if not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000")
        ms = int(_seconds(delay, "delay") * 1000)
        examined = moved = 0
        for p in range((yield from self._layout(topic)).partitions):
            if examined >= batch:
                break
            r, acked = yield from self._write(
                self.scripts.replay_dead, self._group_keys(topic, group, p).as_list(),
                [fingerprint or "", cutoff, batch - examined, ms, actor or self.actor, since, group])
            examined += int(r[0])
            moved += int(r[1])
            if int(r[1]):
                self._require_replicas(acked, f"replaying {int(r[1])} dead letter(s) of {topic!r}")
            if len(r) > 2:
                raise StateConflict(f"dead letter {r[2].decode()} is corrupt and cannot be replayed; delete it, "
                                    f"then replay again ({moved} replayed in this batch)")
        return examined, moved

    replay_dead_batch = operation(_replay_dead_batch)

    def _replay_edited(self, topic: str, msg_id: str, payload: Any, seen_sha1: str, *,
                       actor: str | None = None, group: str = DEFAULT_GROUP):
        """Replace a dead letter's payload and replay it, atomically; returns the id replayed (a new
        id when other groups still share the original). ``seen_sha1`` is the SHA-1 hex of the
        payload the editor started from: if the payload changed meanwhile (or the message is no
        longer dead), StateConflict and nothing changes."""
        data = _to_bytes(payload)
        p = partition_of(msg_id)
        if p >= (yield from self._layout(topic)).partitions:
            raise_for_code(Code.NOT_FOUND, topic, msg_id)
        reply, acked = yield from self._write(self.scripts.replay_edited, self._group_keys(topic, group, p).as_list(), [
            msg_id, data, seen_sha1, actor or self.actor, group, id_for_partition(new_ids(1)[0], p)])
        code = int(reply[0])
        if code == Code.PAYLOAD_TOO_LARGE:
            raise_for_code(code, topic, f"{len(data):,} bytes")
        self._raise_state(code, topic, msg_id, "dead with the payload you edited (someone changed it first)")
        self._require_replicas(acked, f"replaying the edited message {msg_id} of {topic!r}", [reply[1].decode()])
        return reply[1].decode()

    replay_edited = operation(_replay_edited)

    def _find_by_key(self, topic: str, key: str):
        """The id of the live message published with ``key``, or None."""
        return (yield from self._find_by_keys(topic, [key])).get(key)

    find_by_key = operation(_find_by_key)

    def _find_by_keys(self, topic: str, keys: list[str]):
        """{key: id} of the live messages published with any of ``keys``. One HMGET per partition,
        pipelined (a key routed by an ordering key may sit in any partition)."""
        if not keys:
            return {}
        partitions = (yield from self._layout(topic)).partitions

        def fill(pipe):
            for p in range(partitions):
                pipe.hmget(self.keys(topic, p).dedup, keys)
        found = {}
        for ids in (yield pipeline(fill)):
            for key, msg_id in zip(keys, ids, strict=True):
                if msg_id and key not in found:
                    found[key] = msg_id.decode()
        return found

    find_by_keys = operation(_find_by_keys)

    def _server_ms(self):
        """Redis's clock, in ms. One round trip."""
        sec, usec = yield cmd("time")
        return sec * 1000 + usec // 1000

    server_ms = operation(_server_ms)

    def _purge(self, topic: str, state: MessageState | str, *, batch: int = 100, actor: str | None = None,
               group: str = DEFAULT_GROUP):
        """Delete every message of ``group`` in ``state`` (not unacked) that was there when the call
        started, in bounded batches. Returns how many were deleted; each one is an event."""
        cutoff = yield from self._purge_cutoff(topic, state, group=group)
        if cutoff is None:
            return 0
        entered_before, skips, total = (yield from self._server_ms()), {}, 0
        while True:
            deleted, examined = yield from self._purge_batch(topic, state, cutoff=cutoff, batch=batch, actor=actor,
                                                             group=group, entered_before=entered_before, skips=skips)
            total += deleted
            if examined < batch:
                return total

    purge = operation(_purge)

    def _purge_cutoff(self, topic: str, state: MessageState | str, *, group: str = DEFAULT_GROUP):
        """The largest score in ``state`` now across the partitions (None when empty): a purge stops
        there, so a steady inflow cannot keep it going."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged: a worker holds them; wait for "
                                  "their ack or lease expiry, or pause the group first")
        partitions = (yield from self._layout(topic)).partitions

        def fill(pipe):
            for p in range(partitions):
                pipe.zrange(self._group_keys(topic, group, p).state(state), -1, -1, withscores=True)
        scores = [last[0][1] for last in (yield pipeline(fill)) if last]
        return repr(max(scores)) if scores else None

    purge_cutoff = operation(_purge_cutoff)

    def _purge_batch(self, topic: str, state: MessageState | str, *, cutoff: str, batch: int = 100,
                     actor: str | None = None, group: str = DEFAULT_GROUP, entered_before: int | None = None,
                     skips: dict[int, int] | None = None):
        """Delete up to ``batch`` messages of ``state`` scored <= cutoff, from the partitions in
        turn (one script call each); returns (deleted, examined). Fewer examined than ``batch``
        means done.

        With ``entered_before`` (Redis ms, the moment the purge was confirmed) a message that
        entered the state later is kept although its score is within the cutoff: a message
        published, nacked or replayed after the confirmation with an earlier due time. Such
        messages stay at the front of the range, so ``skips`` (per partition, kept by the caller
        between calls) says how many to step over."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged")
        skips = {} if skips is None else skips
        deleted = examined = 0
        for p in range((yield from self._layout(topic)).partitions):
            if examined >= batch:
                break
            n, kept = yield script(self.scripts.purge, self._group_keys(topic, group, p).as_list(), [
                state.value, batch - examined, actor or self.actor, cutoff, group,
                "" if entered_before is None else int(entered_before), skips.get(p, 0)])
            deleted, examined = deleted + int(n), examined + int(n) + int(kept)
            skips[p] = skips.get(p, 0) + int(kept)
        return deleted, examined

    purge_batch = operation(_purge_batch)

    def _heartbeat(self, topics: Iterable[str], worker_id: str, *, remove: bool = False,
                   group: str = DEFAULT_GROUP):
        """Record (or remove) a worker's heartbeat for each topic's group, by Redis's clock."""
        now_ms = yield from self._server_ms()

        def fill(pipe):
            for topic in topics:
                k = self._group_keys(topic, group, 0)
                if remove:
                    pipe.zrem(k.workers, worker_id)
                else:
                    pipe.zadd(k.workers, {worker_id: now_ms})
                    pipe.zremrangebyscore(k.workers, "-inf", now_ms - 3_600_000)
        yield pipeline(fill)

    heartbeat = operation(_heartbeat)

    @staticmethod
    def _raise_state(code: int, topic: str, msg_id: str, expected: str) -> None:
        if code == Code.STATE_CONFLICT:
            raise_for_code(code, topic, f"{msg_id} is not {expected}")
        raise_for_code(code, topic, msg_id)


class DelayQueue(QueueEngine):
    """A Redis delay queue on a blocking redis-py client (QueueEngine says what ``actor`` and
    ``wait_replicas`` do). Thread-safe: share one instance (and its connection pool) per process."""

    def _drive(self, steps):
        """Run an operation (queue_core.steps) to its result with this blocking client."""
        return run(steps, self.redis)


class AsyncDelayQueue(QueueEngine):
    """DelayQueue on a ``redis.asyncio`` client: ``await q.publish(...)``, ``await q.claim(...)``
    and so on. ``keys()`` (no I/O) stays a plain method."""

    _asyncio = True

    def _drive(self, steps):
        return arun(steps, self.redis)

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self.redis.aclose()

    async def __aenter__(self) -> "AsyncDelayQueue":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
