"""The rules both workers share: the waker, the fetch schedule, outcomes, leases and held
messages, the timing constants (``BaseWorker`` in base.py runs them; thread.py and async_worker.py
keep only their loops).

A worker's fetchers claim batches into a local inbox, as far as free capacity allows. One fetcher
serves all partitions of a topic (on Redis Cluster, one per partition: a blocking wait cannot span
hash slots there). It visits the partitions in turn, skipping those whose next due time (from the
last claim's answer) is still ahead, and otherwise blocks in Redis on the partitions' signal lists
(a publish that makes something due sooner pushes there) and on a private wake list. Redis ends
blocking timeouts only ``hz`` times a second, so a *waker* thread pushes to the private list at the
due time, computed from the offset between this machine's clock and Redis TIME: lateness stays in
milliseconds, not 100 ms ticks, and nothing polls.
"""

import logging
import queue as queue_module
import threading
import time
from asyncio import QueueEmpty
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from ..keys import WAKE_KEY_TTL_MS
from ..message import Delivery, Message, Reject
from ..queue import Failure
from ..steps import Steps, pipeline, run

log = logging.getLogger("delayq.worker")

WAKE_EARLY_MS = 1.5     # the waker pushes this much before a due time; the fetcher sleeps the rest locally
# How late a worker aims a claim after a due time (FetchSchedule.claimed). Measured at 200 msg/s
# due 0-1 s ahead, one worker: aimed at the due time, 21 % of messages cost an empty claim (sent a
# little early); 0.1 ms, 10 %; 0.2 ms, 3 %, for a median handler start 0.86 ms after the due time.
CLAIM_MARGIN_MS = 0.2
HEARTBEAT_EVERY = 5.0
TRIM_EVERY = 12         # heartbeats between trims of the hour-old ones (once a minute: an idle worker's commands)
LAYOUT_EVERY = 5.0      # seconds between looks at a topic's partition count
STOP = object()         # tells a handler (or the settler) to finish
CLAIM_MOST = 200        # the default ceiling of one claim (a claim call stays ~1-2 ms of Redis)
PREFETCH_BYTES = 8 << 20   # what unstarted claimed messages may take in a worker's memory, by default
RUN_MOST = 16           # messages one handler takes from the inbox at once (inbox_items)
EMPTY = (queue_module.Empty, QueueEmpty)   # get_nowait() of a thread's queue, of an asyncio one
# A message a handler has been on for RUNNING_CHECK_AFTER seconds has its lease extended at every
# keeper tick, and the keeper ticks at least every RUNNING_CHECK_EVERY while it holds messages: the
# extension's answer is how the worker hears of cancel(..., running=True), so it hears within
# RUNNING_CHECK_AFTER + RUNNING_CHECK_EVERY (< 0.6 s) plus a round trip. Handlers that finish sooner
# cost nothing extra; longer ones one script call per partition per tick, for all of them. The same
# tick sends what handlers reported (progress, log lines): 0.25 s, so with the message page's
# 0.5 s poll a report shows within about 0.8 s of the handler's call (issue 35 asks for 1 s).
RUNNING_CHECK_AFTER = 0.3
RUNNING_CHECK_EVERY = 0.25


class NoMetrics:
    """What a worker calls when nobody asked for metrics: nothing. (The Prometheus ones are
    queue_core.contrib.metrics.WorkerMetrics.)"""

    def claimed(self, topic: str, lateness_s: float) -> None: ...
    def handled(self, topic: str, seconds: float, n: int = 1) -> None: ...
    def settled(self, topic: str, outcome: str, n: int = 1) -> None: ...
    def extended(self, topic: str, n: int = 1) -> None: ...
    def lease_lost(self, topic: str, n: int = 1) -> None: ...
    def watch_in_flight(self, count: Callable[[], int]) -> None: ...
    def waited(self, topic: str) -> None: ...


NO_METRICS = NoMetrics()


class Waker(threading.Thread):
    """Calls ``fire(keys)`` at a precise time for each fetcher's private wake list, so the fetcher
    can block in Redis (woken at once by a publish) and still be woken on the dot at a due time:
    Redis itself checks blocking timeouts only ``hz`` times a second (every 100 ms by default),
    and an asyncio loop's timers round waits up to whole milliseconds. ``fire`` pushes to the
    lists (the blocking worker) or hands them to the event loop (the asyncio one)."""

    def __init__(self, fire: Callable[[list[str]], None], stop: threading.Event):
        super().__init__(name="dq-waker", daemon=True)
        self._fire = fire
        self._stop = stop
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}   # wake key -> local time (s) to push at

    def set(self, key: str, at: float) -> None:
        with self._cond:
            self._due[key] = at
            self._cond.notify()

    def clear(self, key: str) -> None:
        with self._cond:
            self._due.pop(key, None)

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()

    def run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                now = time.time()
                ready = [k for k, at in self._due.items() if at <= now]
                for k in ready:
                    del self._due[k]
                if not ready:
                    wait = min(self._due.values(), default=now + 0.5) - now
                    self._cond.wait(min(max(wait, 0.0), 0.5))
                    continue
            self._fire(ready)


def waking(keys: list[str]) -> Steps:
    """Push a token to each wake list (they expire by themselves if nobody pops them)."""
    def fill(pipe):
        for k in keys:
            pipe.rpush(k, "1")
            pipe.pexpire(k, WAKE_KEY_TTL_MS)
    try:
        yield pipeline(fill)
    except redis.RedisError as exc:
        log.warning("waking a fetcher failed (%s); it wakes at its own timeout", exc)


def push_wakes(client, keys: list[str]) -> None:
    """``waking`` with a blocking client."""
    run(waking(keys), client)


class FetchSchedule:
    """When each partition of a topic next needs a claim, from the claims' answers: shared by the
    blocking and the asyncio worker's fetchers (they differ only in how they wait)."""

    def __init__(self, idle_wait: float):
        self.idle_wait = idle_wait
        self.due_at: dict[int, float] = {}   # Redis ms at which a partition next needs a claim
        self.exact: set[int] = set()         # partitions whose due_at is a real due time (not idle_wait)
        self.offset_ms = 0.0                 # Redis clock minus local clock, from the last claim
        self._turn = 0

    def now_r(self) -> float:
        """Redis's clock now, estimated from the local one."""
        return time.time() * 1000 + self.offset_ms

    def order(self, parts: list[int]) -> list[int]:
        """The partitions to visit this round, starting one further each time (fairness)."""
        start = self._turn % len(parts)
        self._turn += 1
        return parts[start:] + parts[:start]

    def waiting(self, p: int, now_r: float) -> bool:
        return self.due_at.get(p, 0) > now_r

    def claimed(self, p: int, result, asked: int, sent: float | None = None) -> bool:
        """Note a claim's answer (``sent``: the local time.time() the claim was sent at); True
        when the partition may hold more right now."""
        # The offset that lands the next claim on time is Redis's TIME in the script against the
        # local time the claim was *sent*: a claim sent when now_r() reads D then runs at D, the
        # send taking what this one took. Against the time the reply came back (script, reply,
        # parsing: ~0.5 ms) claims landed that much late; and a whole-ms now is on average 0.5 ms
        # early, so the microseconds are used when the claim gave them. CLAIM_MARGIN_MS aims a
        # little late: a claim that lands before the due time finds nothing and costs a round trip.
        now = result.now_exact_ms if result.now_exact_ms is not None else result.now_ms + 0.5
        self.offset_ms = now - (sent if sent is not None else time.time()) * 1000 - CLAIM_MARGIN_MS
        idle_until = result.now_ms + self.idle_wait * 1000
        self.exact.discard(p)
        if len(result.deliveries) == asked:
            self.due_at[p] = 0       # there may be more: come back at once
            return True
        if result.paused or result.next_due_ms < 0 or result.next_due_ms >= idle_until:
            self.due_at[p] = idle_until
        else:
            self.due_at[p] = result.next_due_ms
            self.exact.add(p)
        return False

    def next_wait(self, parts: list[int]) -> tuple[float, float | None] | None:
        """None when a partition needs a claim now; else (ms to wait at most, the Redis time of
        the next real due time or None when there is none: an idle look)."""
        now_r = self.now_r()
        next_any = min(self.due_at.get(p, 0) for p in parts)
        if next_any <= now_r:
            return None
        due_times = [self.due_at[p] for p in parts if p in self.exact]
        if not due_times:
            return next_any - now_r, None
        return min(due_times) - now_r, min(due_times)

    def signalled(self, parts: list[int], keys: list[str], key: str | None) -> None:
        """A publish pushed to ``key`` (one of the partitions' signal ``keys``): claim there now."""
        if key is not None and key in keys:
            self.due_at[parts[keys.index(key)]] = 0

    def rest_after_wake(self, next_r: float) -> float:
        """Woken just before the due time (the push and the BLPOP reply take a round trip): the
        seconds left to sleep locally, so the claim lands on time."""
        rest = next_r - self.now_r()
        return rest / 1000 if 0 < rest < 2 * WAKE_EARLY_MS else 0.0


class ClaimSize:
    """How much a fetcher claims next, and how much free capacity it waits for first.

    With the defaults a worker adapts: a claim that comes back full means a backlog, so the next
    one asks for twice as much (up to ``most``) and the fetcher waits until half a claim of
    capacity is free instead of claiming a handful each time a handler finishes — one claim
    round trip per few messages is what bounded a busy worker. A claim that comes back short
    means the backlog is gone: the size halves back towards one handler's worth and the fetcher
    claims as soon as anything is free, so light load keeps its latency. Large messages shrink
    the claim so that the unstarted ones stay within ``PREFETCH_BYTES``. A ``batch_size`` given
    by the user is a fixed claim size."""

    def __init__(self, most: int, floor: int, capacity: int, fixed: bool):
        self.most = most
        self.floor = min(floor, most)
        self.capacity = capacity
        self.fixed = fixed
        self.want = most if fixed else self.floor
        self.backlog = False

    def least(self) -> int:
        """The free capacity to wait for before the next claim."""
        return max(1, min(self.want, self.capacity) // 2) if self.backlog else 1

    def claimed(self, asked: int, got: int, more: bool, record_bytes: int) -> None:
        """Note one round of claims: ``asked`` and ``got`` messages, ``more`` when a partition
        came back full (there is more due now), ``record_bytes`` the size of what came."""
        self.backlog = more
        if self.fixed:
            return
        if more:
            self.want = min(self.most, max(self.want * 2, got))
        else:
            self.want = max(self.floor, self.want // 2)
        if got and record_bytes:
            self.want = max(1, min(self.want, PREFETCH_BYTES * got // (2 * record_bytes)))


def corrupt_outcomes(ds: list[Delivery]) -> tuple[dict[str, BaseException | None], list[Delivery]]:
    """A batch's corrupt messages (rejected without calling the handler) and the rest."""
    outcomes: dict[str, BaseException | None] = {}
    good = []
    for d in ds:
        if d.message.corrupt:
            outcomes[d.id] = Reject(f"corrupt message: {d.message.corrupt}")
        else:
            good.append(d)
    return outcomes, good


def batch_result(outcomes: dict, result: Any) -> None:
    """Record what a batch handler returned: None acks all; a mapping {message or id: exception}
    names the failures (a Reject dead-letters that one)."""
    for key, exc in (dict(result) if result else {}).items():
        msg_id = key.id if isinstance(key, Message) else str(key)
        if not isinstance(exc, BaseException):
            exc = RuntimeError(f"batch handler returned {exc!r} for message {msg_id}")
        outcomes[msg_id] = exc


def hold(held: dict, deliveries: list[Delivery], metrics) -> int:
    """Record claimed deliveries as held (for the keeper's lease extensions) and their lateness;
    returns the bytes of their records."""
    if not deliveries:
        return 0
    now = time.monotonic()
    first = deliveries[0]   # one claim: one lease length and deadline for all
    lease_s = (first.lease_deadline_ms - first.claimed_ms) / 1000
    claim = HeldClaim(now, lease_s, now + lease_s)
    size = 0
    counted = metrics is not NO_METRICS
    for d in deliveries:   # keyed by the Delivery itself (identity): settling forgets that very object
        held[d] = claim
        if counted:
            metrics.claimed(d.topic, (d.claimed_ms - d.due_ms) / 1000)
        size += d.message.record_size
    return size


def inbox_items(deliveries: list[Delivery], batch: int | None, concurrency: int) -> list[list[Delivery]]:
    """What one claim puts in a worker's inbox: lists of deliveries of one topic (a claim answers
    for one). For batch handlers, lists of up to ``batch``, one handler call each. Otherwise
    runs of messages a handler takes one after the other: one inbox operation, one outcome
    hand-off and one capacity release per run instead of per message (each of those wakes a
    thread, and waking threads is what a busy worker spent most of its own time on). A run is
    at most 1/(2 x concurrency) of the claim, so every handler still gets work, and a single
    message when the claim is small (light load keeps one message per hand-off)."""
    size = batch or max(1, min(RUN_MOST, len(deliveries) // (2 * concurrency)))
    if size >= len(deliveries):
        return [deliveries]
    return [deliveries[start:start + size] for start in range(0, len(deliveries), size)]


def unstarted(items) -> list[Delivery]:
    """The deliveries among inbox items left at shutdown (lists unpacked, stop markers dropped)."""
    return [d for item in items if isinstance(item, list) for d in item]


def split_outcomes(outcomes) -> tuple[list[Delivery], list[Failure]]:
    """Handler outcomes [(delivery, exception or None)] as (to ack, to nack or reject). Deliveries
    an operator cancelled are neither: their lease is gone (the engine would refuse both)."""
    acks = [d for d, exc in outcomes if exc is None and d.message._cancel is None]
    if len(acks) == len(outcomes):   # all acked (the usual run): no second pass
        return acks, []
    failures = [Failure(d, exc, None, isinstance(exc, Reject)) for d, exc in outcomes
                if exc is not None and d.message._cancel is None]
    return acks, failures


def report_acks(worker, acks: list[Delivery], refused: list[Delivery]) -> None:
    for d in refused:
        worker.metrics.lease_lost(d.topic)
        log.warning("worker %s: ack of %s/%s refused: lease lost (handler outlived its lease); "
                    "the message was or will be redelivered", worker.name, d.topic, d.id)
    if worker.metrics is NO_METRICS:   # a no-op call a message was ~0.15 us of a worker's own
        return
    lost = {id(d) for d in refused}
    for d in acks:
        if id(d) not in lost:
            worker.metrics.settled(d.topic, "acked")


def report_nacks(worker, failures: list[Failure], states) -> None:
    for f, state in zip(failures, states, strict=True):
        worker.metrics.settled(f.delivery.topic, "rejected" if f.reject else "nacked")
        if state is None:
            worker.metrics.lease_lost(f.delivery.topic)
            log.warning("worker %s: lease on %s/%s lost before nack; it was redelivered",
                        worker.name, f.delivery.topic, f.delivery.id)


def keeper_tick(lease_s: float) -> float:
    """How often the keeper looks at a lease of ``lease_s``: 4 times per lease length, within
    5 ms and 1 s."""
    return max(0.005, min(1.0, lease_s / 4))


def leases_due(held: list[tuple[Delivery, "HeldClaim"]], now: float, max_lease: float,
               running: set | frozenset = frozenset()) -> dict:
    """{lease length: [(delivery, its claim)]} of the leases past half their length, and of the
    deliveries in ``running`` (handlers long on them: the answer tells of a cancel), until a
    message has been held for max_lease (a hung handler then loses it to another worker).
    Deliveries known to be cancelled are left out: their lease is gone."""
    due: dict[float, list] = {}
    # A claim's messages share one HeldClaim (one deadline as far as this worker knows): when one of
    # them is extended early, all of them are, or the others' deadline would be believed pushed.
    hot = {id(h) for d, h in held if d in running} if running else ()
    for d, h in held:
        if now - h.claimed_at <= max_lease and (h.lease_ends - now < h.lease_s / 2 or id(h) in hot) \
                and d.message._cancel is None:
            due.setdefault(h.lease_s, []).append((d, h))
    return due


def report_extended(metrics, held: list[tuple[Delivery, "HeldClaim"]], results: list, now: float) -> None:
    for (d, h), deadline in zip(held, results, strict=True):
        if deadline is not None:
            h.lease_ends = now + h.lease_s
            metrics.extended(d.topic)
        else:
            metrics.lease_lost(d.topic)


@dataclass(slots=True, eq=False)
class HeldClaim:
    """The lease of the messages of one claim still held: one object they share (one script
    call gave them one lease length and deadline), not one per message."""

    claimed_at: float    # time.monotonic() at claim
    lease_s: float       # the group's visibility timeout
    lease_ends: float    # monotonic time the lease runs out, as far as this worker knows

