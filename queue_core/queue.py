"""DelayQueue: the commands. Every state change is one Lua script in lua/, named after the method
that calls it; the read side lives in read.py."""

import json
import os
import random
import socket
import traceback as tb_module
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis

from .config import TopicConfig
from .errors import Code, InvalidArgument, PayloadNotSerializable, StateConflict, raise_for_code
from .fingerprint import CORRUPT_FP, LEASE_EXPIRED_FP, fingerprint
from .ids import new_ids
from .keys import TopicKeys, topics_registry_key, validate_topic
from .message import Delivery, Message, ms_to_dt
from .read import QueueReader
from .scripts import Scripts, is_cluster
from .states import MessageState

MAX_ERROR_MESSAGE = 1024
MAX_TRACEBACK = 8 * 1024
# Batch sizes keep every script call to a few ms (bench/RESULTS.md: ~13 us per message published,
# ~26 us per message replayed), so Redis is never blocked for long by delayq.
PUBLISH_BATCH = 250      # messages per publish script call
UPKEEP_LIMIT = 1000      # promotions / reaps per claim call (promotion is ~2 commands each)
OP_BATCH = 100           # ids per replay / cancel / delete script call
PIPELINE_DEPTH = 4       # publish script calls per round trip


@dataclass(frozen=True, slots=True)
class ClaimResult:
    deliveries: list[Delivery]
    now_ms: int          # Redis TIME when the script ran
    next_due_ms: int     # earliest moment something becomes actionable; -1 when nothing is scheduled
    paused: bool


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


class DelayQueue(QueueReader):
    """A Redis delay queue. Thread-safe: share one instance (and its connection pool) per process.

    ``actor`` names who acts (recorded in history and events); operator actions pass their own.
    """

    def __init__(self, client: "redis.Redis", prefix: str = "dq", actor: str | None = None):
        self.redis = client
        self.prefix = prefix
        self.actor = actor or f"{socket.gethostname()}:{os.getpid()}"
        self.scripts = Scripts(client)
        self._keys: dict[str, TopicKeys] = {}
        self._registered: set[str] = set()

    @classmethod
    def from_url(cls, url: str, prefix: str = "dq", actor: str | None = None, **redis_kwargs) -> "DelayQueue":
        """``redis://``, ``rediss://`` or ``unix://`` URL; ``redis+cluster://host:port`` for Redis Cluster."""
        if url.startswith("redis+cluster://"):
            from redis.cluster import RedisCluster
            client = RedisCluster.from_url("redis://" + url.removeprefix("redis+cluster://"), **redis_kwargs)
        else:
            client = redis.Redis.from_url(url, **redis_kwargs)
        return cls(client, prefix=prefix, actor=actor)

    def keys(self, topic: str) -> TopicKeys:
        k = self._keys.get(topic)
        if k is None:
            k = self._keys[topic] = TopicKeys.for_topic(topic, self.prefix)
        return k

    def _register(self, topic: str, always: bool = False) -> None:
        # The registry lives outside the topic's hash tag, so it is written by a plain command rather
        # than inside a (single-slot) script. publish() writes it once per topic per process;
        # configuration calls (rare) always do, so a lost registry is rebuilt.
        if always or topic not in self._registered:
            self.redis.sadd(topics_registry_key(self.prefix), topic)
            self._registered.add(topic)

    # -- configuration -------------------------------------------------------------------------

    def configure_topic(self, topic: str, config: TopicConfig | None = None, **options) -> TopicConfig:
        """Write the topic's engine configuration (all fields, atomically). Options not given take
        the TopicConfig defaults, not the previous values: the caller states the whole config."""
        validate_topic(topic)
        cfg = (config or TopicConfig()).replace(**options) if options else (config or TopicConfig())
        k = self.keys(topic)
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(k.config)
        pipe.hset(k.config, mapping=cfg.to_fields())
        if not cfg.paused:
            pipe.rpush(k.signal, "1")  # a resumed topic is claimed at once, not after a worker's idle wait
            pipe.ltrim(k.signal, -64, -1)
        pipe.execute()
        self._register(topic, always=True)
        return cfg

    def topic_config(self, topic: str) -> TopicConfig:
        """The configuration the scripts use (defaults for fields never written). One round trip."""
        raw = self.redis.hgetall(self.keys(topic).config)
        return TopicConfig.from_fields({k.decode(): v.decode() for k, v in raw.items()})

    def is_configured(self, topic: str) -> bool:
        return bool(self.redis.exists(self.keys(topic).config))

    def pause(self, topic: str) -> None:
        """Workers stop claiming from the topic; publishing and promotion go on."""
        self.redis.hset(self.keys(topic).config, "paused", "1")
        self._register(topic, always=True)

    def resume(self, topic: str) -> None:
        k = self.keys(topic)
        self.redis.hset(k.config, "paused", "0")
        self.redis.rpush(k.signal, "1")

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

    def publish(self, topic: str, payload: Any, *, delay: float | timedelta = 0, at: datetime | None = None,
                key: str | None = None, headers: dict | None = None, max_attempts: int | None = None,
                strict: bool = False, actor: str | None = None) -> str:
        """Publish one message; returns its id. With ``key``, publishing is idempotent while a message
        with that key exists (its id is returned), or raises DuplicateMessage when ``strict``."""
        return self._publish(topic, [[payload]], delay, at, key, headers, max_attempts, strict, actor)[0]

    def publish_many(self, topic: str, payloads: Iterable[Any], *, delay: float | timedelta = 0,
                     at: datetime | None = None, headers: dict | None = None,
                     max_attempts: int | None = None, actor: str | None = None) -> list[str]:
        """Publish many messages: script calls of 250 (a few ms each), sent 4 to a round trip.
        Sizes are checked against the topic's cap before anything is sent, so an oversized payload
        refuses the whole call."""
        items = [_to_bytes(p) for p in payloads]
        if len(items) > PUBLISH_BATCH:
            cap = int(self.redis.hget(self.keys(topic).config, "max_payload_bytes")
                      or TopicConfig().max_payload_bytes)
            for i, item in enumerate(items):
                if len(item) > cap:
                    raise_for_code(Code.PAYLOAD_TOO_LARGE, topic,
                                   f"{len(item):,} bytes (message {i + 1} of the batch) > {cap:,} bytes")
        chunks = [items[i:i + PUBLISH_BATCH] for i in range(0, len(items), PUBLISH_BATCH)]
        ids: list[str] = []
        for group in range(0, len(chunks), PIPELINE_DEPTH):
            ids += self._publish(topic, chunks[group:group + PIPELINE_DEPTH], delay, at, None, headers,
                                 max_attempts, False, actor)
        return ids

    def _publish(self, topic, chunks, delay, at, key, headers, max_attempts, strict, actor) -> list[str]:
        """One round trip: each chunk of payloads is one publish script call (pipelined)."""
        k = self.keys(topic)
        if max_attempts is not None and max_attempts < 1:
            raise InvalidArgument("max_attempts must be at least 1")
        header_json = ""
        if headers:
            try:
                header_json = json.dumps(headers, separators=(",", ":"))
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"headers must be JSON-serialisable: {exc}") from exc
        head = self._due_args(delay, at) + [actor or self.actor, "1" if strict else "0"]
        self._register(topic)
        calls = []
        for chunk in chunks:
            args = list(head)
            for msg_id, payload in zip(new_ids(len(chunk)), chunk, strict=True):
                args += [msg_id, _to_bytes(payload), key or "", header_json, max_attempts or 0]
            calls.append(args)
        if len(calls) == 1:
            results = [self.scripts.publish(keys=k.as_list(), args=calls[0])]
        else:
            results = self._pipelined_publish(k, calls)
        ids: list[str] = []
        for result in results:
            code = int(result[0])
            if code == Code.PAYLOAD_TOO_LARGE:
                raise_for_code(code, topic, f"{int(result[2]):,} bytes (message {int(result[1]) + 1} of the "
                                            f"batch) > {int(result[3]):,} bytes")
            if code == Code.DUPLICATE:
                raise_for_code(code, topic, result[1].decode())
            if code == Code.DELAY_TOO_LONG:
                raise_for_code(code, topic, f"{int(result[1]) / 1000:,.0f} s > {int(result[2]) / 1000:,.0f} s")
            ids += [r.decode() for r in result[1:]]
        return ids

    def _pipelined_publish(self, k: TopicKeys, calls: list[list]) -> list:
        if is_cluster(self.redis):
            # redis-py allows no EVALSHA in cluster pipelines: one call after another (each call
            # loads the script on its node if that node lacks it).
            return [self.scripts.publish(keys=k.as_list(), args=args) for args in calls]
        pipe = self.redis.pipeline(transaction=False)  # loads missing scripts before it runs
        for args in calls:
            self.scripts.publish(keys=k.as_list(), args=args, client=pipe)
        return pipe.execute()

    # -- consuming -----------------------------------------------------------------------------

    def claim(self, topic: str, count: int = 1, *, actor: str | None = None) -> list[Delivery]:
        """Claim up to ``count`` due messages (oldest due first) with a fresh lease each."""
        return self.claim_batch(topic, count, actor=actor).deliveries

    def claim_batch(self, topic: str, count: int = 1, *, actor: str | None = None) -> ClaimResult:
        """claim() plus what a worker needs to sleep well: Redis's now and the next due time."""
        if count < 0:
            raise InvalidArgument("count cannot be negative")
        k = self.keys(topic)
        r = self.scripts.claim(keys=k.as_list(), args=[count, random.random(), actor or self.actor,
                                                       UPKEEP_LIMIT, LEASE_EXPIRED_FP, CORRUPT_FP])
        now_ms, next_due, paused, n = int(r[0]), int(r[1]), bool(r[2]), int(r[3])
        unacked = MessageState.unacked
        deliveries = []
        for i in range(4, 4 + n * 7, 7):
            msg_id, token, attempt, due, deadline, payload, meta = r[i:i + 7]
            # The script validated meta and payload before claiming, so parsing can wait until a
            # handler asks for it.
            message = Message(msg_id.decode(), topic, payload, unacked, meta=meta, score=int(deadline))
            deliveries.append(Delivery(message, token.decode(), int(attempt), int(due), now_ms, int(deadline)))
        return ClaimResult(deliveries, now_ms, next_due, paused)

    def ack(self, delivery: Delivery) -> None:
        """Acknowledge: the message is done and removed. LeaseLost if the lease is no longer held."""
        refused = self.ack_many([delivery])
        if refused:
            raise_for_code(Code.LEASE_LOST, delivery.topic, delivery.id)

    def ack_many(self, deliveries: Sequence[Delivery], *, actor: str | None = None) -> list[Delivery]:
        """Acknowledge many (one round trip per topic); returns those refused for a lost lease."""
        refused: list[Delivery] = []
        by_topic: dict[str, list[Delivery]] = {}
        for d in deliveries:
            by_topic.setdefault(d.topic, []).append(d)
        for topic, group in by_topic.items():
            args: list = [actor or self.actor]
            for d in group:
                args += [d.id, d.token]
            codes = self.scripts.ack(keys=self.keys(topic).as_list(), args=args)
            refused += [d for d, c in zip(group, codes, strict=True) if int(c) != 0]
        return refused

    def nack(self, delivery: Delivery, error: BaseException | str | None = None, *,
             retry_in: float | timedelta | None = None, actor: str | None = None) -> MessageState:
        """The attempt failed: retry by the topic's policy (``retry_in`` overrides this one delay) or
        dead-letter when attempts are exhausted. Returns the new state."""
        retry_ms = -1 if retry_in is None else int(_seconds(retry_in, "retry_in") * 1000)
        return self._fail(delivery, error, retry_ms, False, actor)

    def reject(self, delivery: Delivery, error: BaseException | str | None = None, *,
               actor: str | None = None) -> MessageState:
        """Dead-letter now, without retries (bad input that no retry can fix)."""
        return self._fail(delivery, error, -1, True, actor)

    def _fail(self, delivery, error, retry_ms, reject, actor) -> MessageState:
        etype, message, tb = _error_parts(error)
        r = self.scripts.nack(keys=self.keys(delivery.topic).as_list(), args=[
            delivery.id, delivery.token, etype, message, fingerprint(etype, message), tb, retry_ms,
            random.random(), actor or self.actor, "1" if reject else "0"])
        raise_for_code(int(r[0]), delivery.topic, delivery.id)
        return MessageState(r[1].decode())

    def extend(self, delivery: Delivery, seconds: float | timedelta) -> datetime:
        """Extend the lease to Redis now + ``seconds``; returns the new deadline."""
        deadline = self.extend_many([delivery], seconds)[0]
        if deadline is None:
            raise_for_code(Code.LEASE_LOST, delivery.topic, delivery.id)
        return deadline

    def extend_many(self, deliveries: Sequence[Delivery], seconds: float | timedelta) -> list[datetime | None]:
        """Extend many leases of one topic in one round trip; None where the lease was lost."""
        if not deliveries:
            return []
        topic = deliveries[0].topic
        if any(d.topic != topic for d in deliveries):
            raise InvalidArgument("extend_many takes deliveries of one topic")
        ms = int(_seconds(seconds, "seconds") * 1000)
        args: list = [ms]
        for d in deliveries:
            args += [d.id, d.token]
        r = self.scripts.extend(keys=self.keys(topic).as_list(), args=args)
        return [ms_to_dt(int(v)) if int(v) >= 0 else None for v in r[1:]]

    # -- operator actions ----------------------------------------------------------------------

    def _per_id(self, script, topic, head_args, ids) -> list[int]:
        codes: list[int] = []
        ids = list(ids)
        for start in range(0, len(ids), OP_BATCH):
            codes += [int(c) for c in script(keys=self.keys(topic).as_list(),
                                             args=head_args + ids[start:start + OP_BATCH])]
        return codes

    def deliver_now(self, topic: str, msg_id: str, *, actor: str | None = None) -> None:
        """pending or retrying -> ready now. StateConflict if it is in another state."""
        code = self._per_id(self.scripts.deliver_now, topic, [actor or self.actor], [msg_id])[0]
        self._raise_state(code, topic, msg_id, "pending or retrying")

    def cancel(self, topic: str, msg_id: str, *, actor: str | None = None,
               states: Iterable[MessageState] = (MessageState.pending, MessageState.ready,
                                                  MessageState.retrying)) -> None:
        """Remove a message that is not being worked on. StateConflict if it is unacked (or in a
        state outside ``states``), MessageNotFound if it is gone."""
        code = self.remove(topic, [msg_id], event="cancelled", states=states, actor=actor)[0]
        self._raise_state(code, topic, msg_id, " or ".join(MessageState(s).value for s in states))

    def delete(self, topic: str, ids: Iterable[str], *, state: MessageState = MessageState.dead,
               actor: str | None = None) -> int:
        """Delete the given messages if they are still in ``state``; returns how many were deleted."""
        return sum(1 for c in self.remove(topic, ids, event="deleted", states=[state], actor=actor) if c == 0)

    def remove(self, topic: str, ids: Iterable[str], *, event: str, states: Iterable[MessageState],
               actor: str | None = None) -> list[int]:
        """Compare-and-set removal; one code per id (0 removed, Code.NOT_FOUND, Code.STATE_CONFLICT)."""
        allowed = ",".join(MessageState(s).value for s in states)
        return self._per_id(self.scripts.remove, topic, [event, allowed, actor or self.actor], ids)

    def replay(self, topic: str, ids: Iterable[str], *, delay: float | timedelta = 0,
               actor: str | None = None) -> int:
        """dead -> ready (or pending after ``delay``), attempts reset. Ids no longer dead are skipped
        (compare-and-set), so replaying twice never delivers twice. Returns how many moved."""
        ms = int(_seconds(delay, "delay") * 1000)
        return sum(1 for c in self._per_id(self.scripts.replay, topic, [ms, actor or self.actor], ids) if c == 0)

    def replay_dead(self, topic: str, fingerprint: str | None = None, batch: int = 100, *,
                    delay: float | timedelta = 0, actor: str | None = None, progress=None,
                    since: datetime | None = None, until: datetime | None = None) -> int:
        """Replay the whole dead-letter queue, or one error group, in bounded batches (each one
        script call, ~3 ms for 100). Only letters dead when the call started (or before ``until``)
        and after ``since`` are taken. ``progress`` is called with the running total after each
        batch. Returns how many moved."""
        cutoff = self.server_ms() if until is None else int(until.timestamp() * 1000)
        since_ms = 0 if since is None else int(since.timestamp() * 1000)
        total = 0
        while True:
            examined, moved = self.replay_dead_batch(topic, fingerprint, cutoff=cutoff, since=since_ms, batch=batch,
                                                     delay=delay, actor=actor)
            total += moved
            if progress:
                progress(total)
            if examined < batch:
                return total

    def replay_dead_batch(self, topic: str, fingerprint: str | None, *, cutoff: int, since: int = 0,
                          batch: int = 100, delay: float | timedelta = 0, actor: str | None = None) -> tuple[int, int]:
        """One bounded batch of replay_dead over letters that died in [since, cutoff] (Redis ms).
        Returns (examined, moved); fewer examined than ``batch`` means the range is done. Safe to
        repeat after a crash: replayed letters are no longer dead, so nothing moves twice."""
        if not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000")
        ms = int(_seconds(delay, "delay") * 1000)
        r = self.scripts.replay_dead(keys=self.keys(topic).as_list(),
                                     args=[fingerprint or "", cutoff, batch, ms, actor or self.actor, since])
        if len(r) > 2:
            raise StateConflict(f"dead letter {r[2].decode()} is corrupt and cannot be replayed; delete it, then "
                                f"replay again ({int(r[1])} replayed in this batch)")
        return int(r[0]), int(r[1])

    def replay_edited(self, topic: str, msg_id: str, payload: Any, seen_sha1: str, *,
                      actor: str | None = None) -> None:
        """Replace a dead letter's payload and replay it, atomically. ``seen_sha1`` is the SHA-1 hex
        of the payload the editor started from: if the payload changed meanwhile (or the message is
        no longer dead), StateConflict and nothing changes."""
        data = _to_bytes(payload)
        code = int(self.scripts.replay_edited(keys=self.keys(topic).as_list(), args=[
            msg_id, data, seen_sha1, actor or self.actor]))
        if code == Code.PAYLOAD_TOO_LARGE:
            raise_for_code(code, topic, f"{len(data):,} bytes")
        self._raise_state(code, topic, msg_id, "dead with the payload you edited (someone changed it first)")

    def find_by_key(self, topic: str, key: str) -> str | None:
        """The id of the live message published with ``key``, or None. One round trip."""
        found = self.redis.hget(self.keys(topic).dedup, key)
        return found.decode() if found else None

    def server_ms(self) -> int:
        """Redis's clock, in ms. One round trip."""
        sec, usec = self.redis.time()
        return sec * 1000 + usec // 1000

    def purge(self, topic: str, state: MessageState | str, *, batch: int = 100, actor: str | None = None) -> int:
        """Delete every message in ``state`` (not unacked) that was there when the call started, in
        bounded batches. Returns how many were deleted; each one is an event."""
        cutoff = self.purge_cutoff(topic, state)
        if cutoff is None:
            return 0
        total = 0
        while True:
            n = self.purge_batch(topic, state, cutoff=cutoff, batch=batch, actor=actor)
            total += n
            if n < batch:
                return total

    def purge_cutoff(self, topic: str, state: MessageState | str) -> str | None:
        """The largest score in ``state`` now (None when empty): a purge stops there, so messages
        arriving during it are kept and a steady inflow cannot keep it going."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged: a worker holds them; wait for "
                                  "their ack or lease expiry, or pause the topic first")
        last = self.redis.zrange(self.keys(topic).state(state), -1, -1, withscores=True)
        return repr(last[0][1]) if last else None

    def purge_batch(self, topic: str, state: MessageState | str, *, cutoff: str, batch: int = 100,
                    actor: str | None = None) -> int:
        """Delete up to ``batch`` messages of ``state`` scored <= cutoff (one script call)."""
        state = MessageState(state)
        if state is MessageState.unacked:
            raise InvalidArgument("unacked messages cannot be purged")
        return int(self.scripts.purge(keys=self.keys(topic).as_list(),
                                      args=[state.value, batch, actor or self.actor, cutoff]))

    def heartbeat(self, topics: Iterable[str], worker_id: str, *, remove: bool = False) -> None:
        """Record (or remove) a worker's heartbeat for each topic, by Redis's clock. Two round trips."""
        now_ms = self.server_ms()
        pipe = self.redis.pipeline(transaction=False)
        for topic in topics:
            k = self.keys(topic)
            if remove:
                pipe.zrem(k.workers, worker_id)
            else:
                pipe.zadd(k.workers, {worker_id: now_ms})
                pipe.zremrangebyscore(k.workers, "-inf", now_ms - 3_600_000)
        pipe.execute()

    @staticmethod
    def _raise_state(code: int, topic: str, msg_id: str, expected: str) -> None:
        if code == Code.STATE_CONFLICT:
            raise_for_code(code, topic, f"{msg_id} is not {expected}")
        raise_for_code(code, topic, msg_id)
