"""Consuming: ``claim`` (with its upkeep: promotion of due messages, reaping of expired leases),
``ack``, ``nack``, ``reject``, ``release``, ``extend``, ``report`` and the worker ``heartbeat``
(lua/claim.lua, ack.lua, nack.lua, release.lua, extend.lua, report.lua). Calls on many deliveries make one
script call per (topic, partition, group), pipelined where the client allows."""

import json
import random
import traceback as tb_module
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..errors import Code, InvalidArgument, raise_for_code
from ..fingerprint import CORRUPT_FP, EXPIRED_FP, LEASE_EXPIRED_FP, fingerprint
from ..journal import MAX_BYTES, MAX_LINES, REPORT_LINES, REPORT_MOST
from ..keys import (
    DEFAULT_GROUP,
    WORKER_DETAILS_TTL_MS,
    validate_group,
    worker_details_key,
)
from ..layout import TopicLayout
from ..message import Delivery, Message, ms_to_dt
from ..states import MessageState
from ..steps import operation, pipeline, script
from .base import EngineBase, as_seconds, batch_fired

MAX_ERROR_MESSAGE = 1024
MAX_TRACEBACK = 8 * 1024
UPKEEP_LIMIT = 1000      # promotions / reaps per claim call (promotion is ~2 commands each)
# Messages one claim script call takes at most: claim.lua passes two values a message to one ZADD
# and one HSET through Lua's unpack, which stops at 8,000 (after the messages had left ready: a
# claim of 4,000 lost them). More is several calls.
CALL_MOST = 1000
# Acks one ack script call takes at most: ack.lua and its includes unpack one value a message
# (an ack of 8,000 failed whole); a worker's settler acks up to ~1,000 at a time, in one call.
ACK_CALL_MOST = 2000
# A claimed message's attempt and info when the claim's reply names none: a first delivery
# without a delivery record (lua/claim.lua).
_FIRST = (1, None)


@dataclass(frozen=True, slots=True)
class ClaimResult:
    deliveries: list[Delivery]
    now_ms: int          # Redis TIME when the script ran
    next_due_ms: int     # earliest moment something becomes actionable; -1 when nothing is scheduled
    paused: bool
    throttled: bool = False   # a dispatch limit held ready messages back (next_due_ms: when it allows more)
    now_exact_ms: float | None = None   # now_ms with its microseconds (None: not known)
    partitions: int | None = None       # the topic's partition count as the script read it (None: not known)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed delivery for nack_many: ``reject`` dead-letters at once, ``retry_in`` (seconds)
    overrides the policy's delay for this one retry."""

    delivery: Delivery
    error: BaseException | str | None = None
    retry_in: float | timedelta | None = None
    reject: bool = False


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


class Consume(EngineBase):
    """What workers call: claim, ack, nack, reject, release, extend, heartbeat."""

    def _claim(self, topic: str, count: int = 1, *, actor: str | None = None, group: str = DEFAULT_GROUP):
        """Claim up to ``count`` due messages for ``group`` (oldest due first within a partition),
        with a fresh lease each, visiting the partitions in turn."""
        if count < 0:
            raise InvalidArgument("count cannot be negative")
        layout = yield from self._layout(topic)
        start = self._router.spread(f"claim:{topic}") if layout.partitions > 1 else 0
        out: list[Delivery] = []
        for n in range(layout.partitions):
            while True:   # one call per partition, more when a call's ceiling (CALL_MOST) cut it
                if count and len(out) >= count:
                    break   # count 0 runs every partition's upkeep
                want = count - len(out)
                result = yield from self._claim_batch(topic, want, actor=actor, group=group,
                                                      partition=(start + n) % layout.partitions)
                out += result.deliveries
                if len(result.deliveries) < CALL_MOST:   # the partition gave what it had (or all wanted)
                    break
        return out

    claim = operation(_claim)

    def _claim_batch(self, topic: str, count: int = 1, *, actor: str | None = None, group: str = DEFAULT_GROUP,
                     partition: int = 0):
        """claim() from one partition, plus what a worker needs to sleep well: Redis's now and the
        next due time there. One script call: at most CALL_MOST messages."""
        if count < 0:
            raise InvalidArgument("count cannot be negative")
        count = min(count, CALL_MOST)
        k = self._group_keys(topic, group, partition)
        r = yield script(self.scripts.claim, k.as_list(), [count, random.random(), actor or self.actor, UPKEEP_LIMIT,
                                                          LEASE_EXPIRED_FP, CORRUPT_FP, group, EXPIRED_FP, partition])
        whole, _, micros = r[0].partition(b".")   # "<ms>.<µs>": the claim's TIME to the microsecond
        now_ms, next_due, flag, n = int(whole), int(r[1]), int(r[2]), int(r[3])
        deliveries = []
        if n:
            token, deadline = r[4].decode(), int(r[5])
            claimed, end = Message.claimed, 7 + n * 3
            # Three values a message, then (place, attempt, info) of those that are not a first
            # delivery or have a delivery record: most have neither (claim.lua).
            odd = {int(place): (int(attempt), info or None)
                   for place, attempt, info in zip(r[end::3], r[end + 1::3], r[end + 2::3], strict=True)}
            # Strided slices zipped cost less than a slice each.
            for place, (msg_id, due, record) in enumerate(zip(r[7:end:3], r[8:end:3], r[9:end:3], strict=True), 1):
                # The script checked the record before claiming; header and payload are split only
                # when a handler asks for them.
                attempt, info = odd.get(place, _FIRST) if odd else _FIRST
                due = int(due)
                message = claimed(msg_id.decode(), topic, group, partition, record, info, attempt, deadline, due)
                deliveries.append(Delivery(message, token, attempt, due, now_ms, deadline))
        return ClaimResult(deliveries, now_ms, next_due, flag == 1, flag == 2,
                           now_ms + int(micros) / 1000 if micros else None, TopicLayout.parse(r[6]).partitions)

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
            keys, head = self.keys(topic, partition, group).as_list(), [actor or self.actor, group]
            runs: dict[str, list[Delivery]] = {}   # by token: one per claim call (ack.lua's runs)
            for d in ds:
                run = runs.get(d.token)
                if run is None:
                    runs[d.token] = [d]
                else:
                    run.append(d)
            args, in_call = list(head), []
            for token, run in runs.items():
                for start in range(0, len(run), ACK_CALL_MOST):
                    part = run[start:start + ACK_CALL_MOST]
                    if in_call and len(in_call) + len(part) > ACK_CALL_MOST:
                        calls.append((keys, args, in_call, (topic, partition)))
                        args, in_call = list(head), []
                    # The claim time makes the usual lease cheap to find (ack.lua); one a hand-made
                    # Delivery lacks sends '' and its acks the longer way.
                    claimed = part[0].claimed_ms
                    args += [token, claimed if type(claimed) is int else "", len(part), *[d.message.id for d in part]]
                    in_call += part
            calls.append((keys, args, in_call, (topic, partition)))
        refused: list[Delivery] = []
        fired = set()
        for (_keys, _args, ds, place), reply in zip(calls, (yield from self._run_many(self.scripts.ack, calls)),
                                                     strict=True):
            refused += [ds[int(at) - 1] for at in batch_fired(reply, place, fired)]   # lost leases, by place
        yield from self._forward_fired(fired)
        return refused

    ack_many = operation(_ack_many)

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
                retry_ms = -1 if f.retry_in is None else int(as_seconds(f.retry_in, "retry_in") * 1000)
                args += [f.delivery.id, f.delivery.token, etype, message, fingerprint(etype, message), tb, retry_ms,
                         "1" if f.reject else "0"]
            calls.append((self.keys(topic, partition, group).as_list(), args, indexes, (topic, partition)))
        out: list[MessageState | None] = [None] * len(failures)
        fired = set()
        for (_k, _a, indexes, place), reply in zip(calls, (yield from self._run_many(self.scripts.nack, calls)),
                                                    strict=True):
            reply = batch_fired(reply, place, fired)
            for n, i in enumerate(indexes):
                state = reply[2 * n]
                out[i] = None if isinstance(state, int) else MessageState(state.decode())
        yield from self._forward_fired(fired)
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
            raise_for_code(Code.CANCELLED if delivery.message.cancelled else Code.LEASE_LOST, delivery.topic,
                           delivery.id)
        return deadline

    extend = operation(_extend)

    def _extend_many(self, deliveries: Sequence[Delivery], seconds: float | timedelta):
        """Extend many leases (one script call per topic, partition and group); None where lost.
        A delivery an operator cancelled (cancel(..., running=True)) is marked on its message:
        ``message.cancelled`` becomes true (the worker's keeper learns it this way)."""
        if not deliveries:
            return []
        ms = int(as_seconds(seconds, "seconds") * 1000)
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
                if int(v) == Code.CANCELLED:
                    d.message._cancel = True
        return out

    extend_many = operation(_extend_many)

    def _report(self, deliveries: Sequence[Delivery]):
        """Send what handlers reported on these deliveries (``message.progress()`` and
        ``message.log()``, buffered on each message) in one script call per topic, partition and
        group (lua/report.lua); deliveries with nothing buffered are skipped. Fenced by each lease's
        token. Returns one code per delivery (0 written or nothing to write, Code.LEASE_LOST,
        Code.CANCELLED: the message is marked cancelled as by extend_many)."""
        out = [int(Code.OK)] * len(deliveries)
        index = {id(d): i for i, d in enumerate(deliveries)}
        calls = []
        for (topic, partition, group), ds in self._by_place(
                [d for d in deliveries if d.message._journal]).items():
            keys = self.keys(topic, partition, group).as_list()
            args: list = [MAX_LINES, MAX_BYTES]
            batch: list[Delivery] = []
            for d in ds:
                progress, lines = d.message._journal.take()
                if batch and (len(args) + len(lines) > REPORT_LINES or len(batch) >= REPORT_MOST):   # calls stay short
                    calls.append((keys, args, batch))
                    args, batch = [MAX_LINES, MAX_BYTES], []
                args += [d.id, d.token, progress, len(lines), *lines]
                batch.append(d)
            calls.append((keys, args, batch))
        if not calls:
            return out
        for (_k, _a, ds), reply in zip(calls, (yield from self._run_many(self.scripts.report, calls)), strict=True):
            for d, code in zip(ds, reply, strict=True):
                out[index[id(d)]] = int(code)
                if int(code) == Code.CANCELLED:
                    d.message._cancel = True
        return out

    report = operation(_report)

    def _heartbeat(self, topics: Iterable[str], worker_id: str, *, remove: bool = False,
                   group: str = DEFAULT_GROUP, details: Mapping | None = None, trim: bool = True):
        """Record (or remove) a worker's heartbeat for each topic's group, by Redis's clock, and
        with ``details`` (JSON-able: what the dashboard's Workers page shows, read back by
        live_workers) the worker's details key, expiring by itself (keys.worker_details_key);
        removing deletes it. ``trim``: also drop heartbeats over an hour old (a worker trims once
        a minute, not at every beat). Two round trips (the clock, then one pipeline). Returns
        Redis's ms."""
        now_ms = yield from self._server_ms()
        topics = list(topics)
        details_key = worker_details_key(validate_group(group), worker_id, self.prefix)

        def fill(pipe):
            for topic in topics:
                k = self._group_keys(topic, group, 0)
                if remove:
                    pipe.zrem(k.workers, worker_id)
                else:
                    pipe.zadd(k.workers, {worker_id: now_ms})
                    if trim:
                        pipe.zremrangebyscore(k.workers, "-inf", now_ms - 3_600_000)
            if remove:
                pipe.delete(details_key)
            elif details is not None:
                pipe.set(details_key, json.dumps({**details, "topics": topics}), px=WORKER_DETAILS_TTL_MS)
        yield pipeline(fill)
        return now_ms

    heartbeat = operation(_heartbeat)
