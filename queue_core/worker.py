"""Worker: runs handlers for one consumer group's claimed messages with N threads.

Threads and why:
- *fetchers* claim batches into a local inbox, as far as free capacity allows. One fetcher serves
  all partitions of a topic (on Redis Cluster, one per partition: a blocking wait cannot span
  hash slots there). It visits the partitions in turn, skipping those whose next due time (from
  the last claim's answer) is still ahead, and otherwise blocks in Redis on the partitions'
  signal lists (a publish that makes something due sooner pushes there) and on a private wake
  list. Redis ends blocking timeouts only ``hz`` times a second, so a *waker* thread pushes to
  the private list at the due time, computed from the offset between this machine's clock and
  Redis TIME: lateness stays in milliseconds, not 100 ms ticks, and nothing polls;
- ``concurrency`` *handler* threads run handlers. They never talk to Redis and never poll: each
  blocks on the inbox and hands its outcome to the settler. (With every handler thread making its
  own ack round trip, Python 3.13 ran this worker at half the speed of 3.12: the threads spent
  their time waiting to get the GIL back after each socket call.)
- one *settler* acks and nacks for all handlers, everything that finished since its last call
  in one script call per partition;
- one *keeper* extends the leases of messages still held (long handlers never lose them, up to
  ``max_lease``) and sends heartbeats for the dashboard.

On SIGTERM/SIGINT (or stop()): fetchers stop claiming, messages claimed but not started go back
to ready at once (their attempt is not counted), handlers finish what they started within
``grace`` seconds; anything left is redelivered after its lease expires. Nothing is lost.
"""

import contextlib
import logging
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from .errors import InvalidArgument, QueueError, WorkerCrashed
from .ids import new_id
from .keys import DEFAULT_GROUP, WAKE_KEY_TTL_MS, validate_group, wake_key
from .message import Delivery, Message, Reject
from .metrics import NO_METRICS, NoMetrics
from .queue import DelayQueue, Failure

log = logging.getLogger("delayq.worker")

Handler = Callable[[Message], None]
BatchHandler = Callable[[list[Message]], Mapping[str, BaseException] | None]

WAKE_EARLY_MS = 1.5     # the waker pushes this much before a due time; the fetcher sleeps the rest locally
HEARTBEAT_EVERY = 5.0
LAYOUT_EVERY = 5.0      # seconds between looks at a topic's partition count
_STOP = object()        # tells a handler thread to finish


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


def push_wakes(client, keys: list[str]) -> None:
    """Push a token to each wake list (they expire by themselves if nobody pops them)."""
    try:
        pipe = client.pipeline(transaction=False)
        for k in keys:
            pipe.rpush(k, "1")
            pipe.pexpire(k, WAKE_KEY_TTL_MS)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("waking a fetcher failed (%s); it wakes at its own timeout", exc)


class _Capacity:
    """How many more messages this worker may hold (claimed but not settled)."""

    def __init__(self, size: int):
        self._free = size
        self._cond = threading.Condition()

    def reserve(self, most: int, stop: threading.Event) -> int:
        with self._cond:
            while self._free == 0 and not stop.is_set():
                self._cond.wait()
            if stop.is_set():
                return 0
            n = min(most, self._free)
            self._free -= n
            return n

    def release(self, n: int = 1) -> None:
        if n:
            with self._cond:
                self._free += n
                self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


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

    def claimed(self, p: int, result, asked: int) -> bool:
        """Note a claim's answer; True when the partition may hold more right now."""
        self.offset_ms = result.now_ms - time.time() * 1000
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


def hold(held: dict, deliveries: list[Delivery], metrics) -> None:
    """Record claimed deliveries as held (for the keeper's lease extensions) and their lateness."""
    now = time.monotonic()
    for d in deliveries:
        lease_s = (d.lease_deadline_ms - d.claimed_ms) / 1000
        held[(d.topic, d.partition, d.id)] = HeldMessage(d, now, lease_s, now + lease_s)
        metrics.claimed(d.topic, (d.claimed_ms - d.due_ms) / 1000)


def inbox_items(deliveries: list[Delivery], batch: int | None) -> list:
    """What one claim puts in a worker's inbox: each delivery, or for batch handlers lists of up to
    ``batch`` (a claim answers for one topic; one queue operation per list, not per message)."""
    if not batch:
        return deliveries
    return [deliveries[start:start + batch] for start in range(0, len(deliveries), batch)]


def unstarted(items) -> list[Delivery]:
    """The deliveries among inbox items left at shutdown (lists unpacked, stop markers dropped)."""
    waiting: list[Delivery] = []
    for item in items:
        if isinstance(item, list):
            waiting += item
        elif isinstance(item, Delivery):
            waiting.append(item)
    return waiting


def split_outcomes(outcomes) -> tuple[list[Delivery], list[Failure]]:
    """Handler outcomes [(delivery, exception or None)] as (to ack, to nack or reject)."""
    acks = [d for d, exc in outcomes if exc is None]
    failures = [Failure(d, exc, None, isinstance(exc, Reject)) for d, exc in outcomes if exc is not None]
    return acks, failures


def report_acks(worker, acks: list[Delivery], refused: list[Delivery]) -> None:
    for d in refused:
        worker.metrics.lease_lost(d.topic)
        log.warning("worker %s: ack of %s/%s refused: lease lost (handler outlived its lease); "
                    "the message was or will be redelivered", worker.name, d.topic, d.id)
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


def leases_due(held, now: float, max_lease: float) -> dict:
    """{lease length: [held]} of the leases past half their length, until a message has been held
    for max_lease (a hung handler then loses it to another worker)."""
    due: dict[float, list] = {}
    for h in held:
        if now - h.claimed_at <= max_lease and h.lease_ends - now < h.lease_s / 2:
            due.setdefault(h.lease_s, []).append(h)
    return due


def report_extended(metrics, held: list, results: list, now: float) -> None:
    for h, deadline in zip(held, results, strict=True):
        if deadline is not None:
            h.lease_ends = now + h.lease_s
            metrics.extended(h.delivery.topic)
        else:
            metrics.lease_lost(h.delivery.topic)


@dataclass(slots=True)
class HeldMessage:
    delivery: Delivery
    claimed_at: float    # time.monotonic() at claim
    lease_s: float       # the group's visibility timeout
    lease_ends: float    # monotonic time the lease runs out, as far as this worker knows


class Worker:
    """Consume ``handlers`` = {topic: handler} for one consumer ``group``.

    A handler gets one Message; returning acks it, raising nacks it (retry by the group's policy),
    raising ``Reject`` dead-letters it at once. With ``batch=N`` a handler gets a list of up to N
    messages instead: returning acks them all, except those named in a returned mapping
    ``{message id: exception}`` (a ``Reject`` dead-letters that one, any other exception nacks
    it); raising nacks the whole batch (``Reject``: dead-letters it)."""

    def __init__(self, queue: DelayQueue, handlers: Mapping[str, Callable], *, group: str = DEFAULT_GROUP,
                 concurrency: int = 8, prefetch: int | None = None, batch_size: int = 100, batch: int | None = None,
                 max_lease: float = 3600.0, grace: float = 30.0, idle_wait: float = 2.0, name: str | None = None,
                 metrics: NoMetrics | None = None):
        if not handlers:
            raise InvalidArgument("a worker needs at least one topic handler")
        if concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        if batch is not None and not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000 messages")
        for topic in handlers:
            queue.keys(topic)  # validates the name now, not in a thread later
        self.queue = queue
        self.group = validate_group(group)
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.batch = batch
        per_thread = batch or 1
        self.batch_size = max(1, batch_size, per_thread)
        # Prefetch defaults to one claim batch: a claim round trip per handful of messages would
        # bound a busy worker, and unstarted prefetch goes back at once on stop (release()).
        self.capacity = concurrency * per_thread + (prefetch if prefetch is not None else self.batch_size)
        self.max_lease = max_lease
        self.grace = grace
        self.idle_wait = idle_wait
        self.name = name or f"{queue.actor}:{new_id()[-6:]}"
        self.processed = 0
        self.failed = 0
        self.crashed: str | None = None     # "thread name: error" of a thread that died
        self._stop = threading.Event()
        self._hard_stop = threading.Event()
        self._keeper_wake = threading.Event()
        self._inbox: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._outcomes: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._capacity = _Capacity(self.capacity)
        self._held: dict[tuple[str, int, str], HeldMessage] = {}   # claimed and not settled, for the keeper
        self._held_lock = threading.Lock()
        self._waker = Waker(lambda keys: push_wakes(queue.redis, keys), self._hard_stop)
        self._wake_keys: set[str] = set()
        self.metrics = metrics or NO_METRICS      # queue_core.metrics.WorkerMetrics for --metrics-port
        self.metrics.watch_in_flight(lambda: len(self._held))

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get ``grace`` seconds to finish."""
        self._stop.set()
        self._capacity.wake()
        threading.Thread(target=self._wake_fetchers, daemon=True).start()

    def _guarded(self, target: Callable) -> Callable:
        """A thread's target that stops the whole worker if it dies: a worker missing its fetcher
        or settler would keep its heartbeat and claim nothing (or never ack) without a word."""
        def run(*args):
            try:
                target(*args)
            except BaseException as exc:
                self.crashed = f"{threading.current_thread().name}: {exc!r}"
                log.critical("worker %s: thread %s failed; stopping the worker", self.name,
                             threading.current_thread().name, exc_info=True)
                self.stop()
        return run

    def _signal_keys(self, topic: str, partitions) -> list[str]:
        return [self.queue.keys(topic, p, self.group).signal for p in partitions]

    def _wake_fetchers(self) -> None:
        # A fetcher may be blocked in BLPOP for up to idle_wait: its own wake list ends a wait for a
        # due time, and one token per partition a wait for a publish (another worker may take that
        # token instead; it then does one spare claim).
        with contextlib.suppress(redis.RedisError):
            for key in list(self._wake_keys):
                self.queue.redis.rpush(key, "1")
                self.queue.redis.pexpire(key, WAKE_KEY_TTL_MS)
            for topic in self.handlers:
                for key in self._signal_keys(topic, range(self.queue.layout(topic).partitions)):
                    self.queue.redis.rpush(key, "1")

    def run(self, install_signal_handlers: bool = True) -> None:
        """Run until stop() or SIGTERM/SIGINT. A second signal abandons in-flight work at once."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            def on_signal(signum, _frame):
                if self._stop.is_set():
                    self._hard_stop.set()
                log.info("worker %s: %s received, stopping", self.name, signal.Signals(signum).name)
                self.stop()
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        log.info("worker %s: topics %s, group %s, concurrency %d%s", self.name, ", ".join(self.handlers),
                 self.group, self.concurrency, f", batches of {self.batch}" if self.batch else "")
        fetchers = []
        for topic in self.handlers:
            if self.queue.cluster:
                fetchers += [threading.Thread(target=self._guarded(self._fetch_loop), args=(topic, p),
                                              name=f"dq-fetch-{topic}-{p}", daemon=True)
                             for p in range(self.queue.layout(topic).partitions)]
            else:
                fetchers.append(threading.Thread(target=self._guarded(self._fetch_loop), args=(topic, None),
                                                 name=f"dq-fetch-{topic}", daemon=True))
        runners = [threading.Thread(target=self._guarded(self._handle_loop), name=f"dq-handler-{i}", daemon=True)
                   for i in range(self.concurrency)]
        settler = threading.Thread(target=self._guarded(self._settle_loop), name="dq-settler", daemon=True)
        keeper = threading.Thread(target=self._guarded(self._keep_loop), name="dq-keeper", daemon=True)
        for t in (*fetchers, *runners, settler, keeper, self._waker):
            t.start()
        while not self._stop.wait(0.5):   # a timed wait keeps the main thread responsive to signals
            pass
        for t in fetchers:
            t.join()
        self._release_unstarted()
        for _ in runners:
            self._inbox.put(_STOP)
        deadline = time.monotonic() + self.grace
        for t in runners:
            while t.is_alive() and time.monotonic() < deadline and not self._hard_stop.is_set():
                t.join(min(0.5, max(0.0, deadline - time.monotonic())))
        self._outcomes.put(_STOP)
        settler.join(max(5.0, deadline - time.monotonic()))
        self._hard_stop.set()
        self._keeper_wake.set()
        keeper.join(5)
        with contextlib.suppress(redis.RedisError):
            self.queue.heartbeat(self.handlers, self.name, remove=True, group=self.group)
            for key in self._wake_keys:
                self.queue.redis.delete(key)
        log.info("worker %s stopped: %d processed, %d failed", self.name, self.processed, self.failed)
        if self.crashed:
            raise WorkerCrashed(f"worker {self.name} stopped because its thread {self.crashed} failed; restart it "
                                "(messages it held return after their lease)")

    def _release_unstarted(self) -> None:
        """Claimed but never started: back to ready now, the attempt not counted."""
        items = []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue_module.Empty:
                break
        waiting = unstarted(items)
        if not waiting:
            return
        self._capacity.release(len(waiting))
        try:
            n = self.queue.release(waiting, actor=self.name)
            log.info("worker %s: %d claimed but unstarted messages given back", self.name, n)
        except (QueueError, redis.RedisError) as exc:
            log.warning("worker %s: giving back %d unstarted messages failed (%s); they return after their "
                        "lease", self.name, len(waiting), exc)
        self._forget(waiting)

    # -- fetching ------------------------------------------------------------------------------

    def _fetch_loop(self, topic: str, only: int | None) -> None:
        """Claim for ``topic`` from every partition (``only`` None) or from one."""
        q = self.queue
        schedule = FetchSchedule(self.idle_wait)
        failures = 0
        parts: list[int] = []
        layout_checked = -LAYOUT_EVERY
        while not self._stop.is_set():
            if time.monotonic() - layout_checked >= LAYOUT_EVERY:
                try:
                    count = q.layout(topic, fresh=True).partitions
                except redis.RedisError as exc:
                    # Redis down or failing over: this thread must outlive it, as the claims below do.
                    failures += 1
                    log.warning("worker %s: reading %r's layout failed (%s); retrying", self.name, topic, exc)
                    self._stop.wait(min(5.0, 0.1 * 2 ** failures))
                    continue
                parts = [p for p in range(count) if only is None or p == only]
                layout_checked = time.monotonic()
                if not parts:
                    return   # this partition no longer exists
            n = self._capacity.reserve(self.batch_size, self._stop)
            if n == 0:
                break
            now_r = schedule.now_r()
            remaining, more = n, False
            try:
                for p in schedule.order(parts):
                    if schedule.waiting(p, now_r):
                        continue
                    if remaining == 0:
                        more = True
                        break
                    res = q.claim_batch(topic, remaining, actor=self.name, group=self.group, partition=p)
                    more = schedule.claimed(p, res, remaining) or more
                    remaining -= len(res.deliveries)
                    self._dispatch(res.deliveries)
                failures = 0
            except redis.RedisError as exc:
                failures += 1
                log.warning("worker %s: claim from %r failed (%s); retrying", self.name, topic, exc)
                self._capacity.release(remaining)
                self._stop.wait(min(5.0, 0.1 * 2 ** failures))
                continue
            self._capacity.release(remaining)
            if more:
                continue
            self._sleep_until_due(topic, parts, schedule)

    def _dispatch(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        with self._held_lock:
            hold(self._held, deliveries, self.metrics)
        self._keeper_wake.set()
        for item in inbox_items(deliveries, self.batch):
            self._inbox.put(item)

    def _sleep_until_due(self, topic: str, parts: list[int], schedule: FetchSchedule) -> None:
        """Block on the partitions' signal lists (a publish that makes something due sooner pushes
        there) until the next due time. For a real due time the waker pushes to this fetcher's own
        wake list at that moment, so the wait ends on the dot; an idle look at empty partitions is
        left to Redis's coarse timeout."""
        wait = schedule.next_wait(parts)
        if wait is None:
            return
        keys = self._signal_keys(topic, parts)
        wait_ms, next_r = wait
        if next_r is None:
            schedule.signalled(parts, keys, self._block(keys, wait_ms))
            return
        own = wake_key(keys[0], f"{self.name}:{threading.get_ident()}")
        self._wake_keys.add(own)
        self._waker.set(own, (next_r - schedule.offset_ms - WAKE_EARLY_MS) / 1000)
        # The timeout is only a backstop (the waker normally ends the wait at the due time).
        woke = self._block([*keys, own], wait_ms + 1000)
        self._waker.clear(own)
        schedule.signalled(parts, keys, woke)
        if woke == own and (rest := schedule.rest_after_wake(next_r)):
            time.sleep(rest)

    def _block(self, keys: list[str], ms: float) -> str | None:
        """BLPOP the signal lists for up to ``ms``; the key that was signalled, or None."""
        try:
            got = self.queue.redis.blpop(keys, timeout=max(ms, 1) / 1000)
            return got[0].decode() if got else None
        except redis.RedisError as exc:
            log.warning("worker %s: waiting for a signal failed (%s)", self.name, exc)
            self._stop.wait(min(ms, 1000) / 1000)
            return None

    # -- handling ------------------------------------------------------------------------------

    def _take(self) -> list[Delivery] | None:
        """The next message (or, with ``batch``, the next list of up to that many, of one topic);
        None to finish."""
        first = self._inbox.get()
        if first is _STOP:
            return None
        return first if isinstance(first, list) else [first]

    def _handle_loop(self) -> None:
        while not self._hard_stop.is_set():
            taken = self._take()
            if taken is None:
                return
            if self.batch:
                self._outcomes.put(self._run_batch(taken[0].topic, taken))   # one claim's: one topic
            else:
                self._outcomes.put([(taken[0], self._run_one(taken[0]))])
            # Capacity counts claimed work not yet finished: the fetcher may claim more while the
            # settler acks (the keeper still extends these leases until they are settled).
            self._capacity.release(len(taken))

    def _run_one(self, d: Delivery) -> BaseException | None:
        """None to ack; the exception otherwise (Reject dead-letters)."""
        started = time.perf_counter()
        try:
            if d.message.corrupt:
                raise Reject(f"corrupt message: {d.message.corrupt}")
            self.handlers[d.topic](d.message)
            return None
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        finally:
            self.metrics.handled(d.topic, time.perf_counter() - started)

    def _run_batch(self, topic: str, ds: list[Delivery]) -> list[tuple[Delivery, BaseException | None]]:
        outcomes, good = corrupt_outcomes(ds)
        if good:
            started = time.perf_counter()
            try:
                batch_result(outcomes, self.handlers[topic]([d.message for d in good]))
            except Exception as exc:  # noqa: BLE001 - the whole batch failed
                outcomes.update(dict.fromkeys((d.id for d in good), exc))
            self.metrics.handled(topic, time.perf_counter() - started, len(good))
        return [(d, outcomes.get(d.id)) for d in ds]

    # -- settling ------------------------------------------------------------------------------

    def _settle_loop(self) -> None:
        """Ack and nack for every handler thread: whatever finished since the last call, in one
        script call per partition. Blocks while nothing finished (no timed polling)."""
        finishing = False
        while not finishing:
            first = self._outcomes.get()
            batch = []
            if first is _STOP:
                finishing = True
            else:
                batch += first
            while len(batch) < 1000:
                try:
                    item = self._outcomes.get_nowait()
                except queue_module.Empty:
                    break
                if item is _STOP:
                    finishing = True
                    break
                batch += item
            if batch:
                self._settle(batch)

    def _settle(self, outcomes: list[tuple[Delivery, BaseException | None]]) -> None:
        acks, failures = split_outcomes(outcomes)
        if acks:
            try:
                report_acks(self, acks, self.queue.ack_many(acks, actor=self.name))
            except (QueueError, redis.RedisError) as exc:
                log.error("worker %s: ack of %d messages failed (%s); they return after their lease",
                          self.name, len(acks), exc)
            self.processed += len(acks)   # one settler thread: no lock needed
        if failures:
            self.failed += len(failures)
            try:
                report_nacks(self, failures, self.queue.nack_many(failures, actor=self.name))
            except (QueueError, redis.RedisError) as exc:
                log.error("worker %s: nack of %d messages failed (%s); they return after their lease",
                          self.name, len(failures), exc)
        self._forget([d for d, _ in outcomes])

    def _forget(self, deliveries: list[Delivery]) -> None:
        with self._held_lock:
            for d in deliveries:
                self._held.pop((d.topic, d.partition, d.id), None)

    # -- leases and heartbeats -----------------------------------------------------------------

    def _keep_loop(self) -> None:
        last_beat = 0.0
        while not self._hard_stop.is_set():
            # Woken early when new deliveries arrive, so even the shortest lease is watched at once.
            self._keeper_wake.wait(self._keeper_tick())
            self._keeper_wake.clear()
            if self._hard_stop.is_set():
                break
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_EVERY:
                try:
                    self.queue.heartbeat(self.handlers, self.name, group=self.group)
                    last_beat = now
                except redis.RedisError as exc:
                    log.warning("worker %s: heartbeat failed (%s)", self.name, exc)
            self._extend_leases(now)

    def _keeper_tick(self) -> float:
        """Tick often enough that every held lease is checked at least 4 times per lease length."""
        with self._held_lock:
            shortest = min((h.lease_s for h in self._held.values()), default=4.0)
        return max(0.005, min(1.0, shortest / 4))

    def _extend_leases(self, now: float) -> None:
        """Extend every held lease that is past half its length, by its full length (leases_due)."""
        with self._held_lock:
            due = leases_due(list(self._held.values()), now, self.max_lease)
        for lease_s, held in due.items():
            try:
                results = self.queue.extend_many([h.delivery for h in held], lease_s)
            except redis.RedisError as exc:
                log.warning("worker %s: extending %d leases failed (%s)", self.name, len(held), exc)
                continue
            report_extended(self.metrics, held, results, now)
