"""Worker: runs handlers for claimed messages with N threads.

Threads and why:
- one *fetcher* per topic claims batches into a local inbox, as far as free capacity allows, and
  otherwise sleeps until the next due time (from claim's answer) or until a publish signals the
  topic. Blocking calls are woken by Redis only ``hz`` times a second, so the fetcher blocks only
  until shortly before the due time and sleeps the rest locally, corrected by the offset between
  this machine's clock and Redis TIME: that keeps lateness in milliseconds, not 100 ms ticks;
- ``concurrency`` *handler* threads run handlers and ack in batches (one round trip per batch);
- one *keeper* extends the leases of messages still held (long handlers never lose them, up to
  ``max_lease``) and sends heartbeats for the dashboard.

On SIGTERM/SIGINT (or stop()): fetchers stop claiming, handlers finish what was claimed within
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

import redis

from .errors import InvalidArgument, LeaseLost, QueueError
from .ids import new_id
from .message import Delivery, Message, Reject
from .queue import DelayQueue

log = logging.getLogger("delayq.worker")

Handler = Callable[[Message], None]

BLOCK_MARGIN_MS = 150   # block in Redis only until this long before the due time (hz = 10 -> 100 ms ticks)
LOCAL_STEP_MS = 10      # then sleep locally in steps this long, looking for wake-up signals between them
HEARTBEAT_EVERY = 5.0


class _Capacity:
    """How many more messages this worker may hold (claimed but not finished)."""

    def __init__(self, size: int):
        self._free = size
        self._cond = threading.Condition()

    def reserve(self, most: int, stop: threading.Event) -> int:
        with self._cond:
            while self._free == 0 and not stop.is_set():
                self._cond.wait(0.5)
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


@dataclass(slots=True)
class _Held:
    delivery: Delivery
    claimed_at: float    # time.monotonic() at claim
    lease_s: float       # the topic's visibility timeout
    lease_ends: float    # monotonic time the lease runs out, as far as this worker knows


class Worker:
    """Consume ``handlers`` = {topic: handler(message)}. A handler returning normally acks; raising
    nacks (retry by the topic's policy); raising ``Reject`` dead-letters at once."""

    def __init__(self, queue: DelayQueue, handlers: Mapping[str, Handler], *, concurrency: int = 8,
                 prefetch: int | None = None, batch_size: int = 100, max_lease: float = 3600.0,
                 grace: float = 30.0, idle_wait: float = 2.0, name: str | None = None):
        if not handlers:
            raise InvalidArgument("a worker needs at least one topic handler")
        if concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        for topic in handlers:
            queue.keys(topic)  # validates the name now, not in a thread later
        self.queue = queue
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.batch_size = max(1, batch_size)
        self.capacity = concurrency + (prefetch if prefetch is not None else concurrency)
        self.max_lease = max_lease
        self.grace = grace
        self.idle_wait = idle_wait
        self.name = name or f"{queue.actor}:{new_id()[-6:]}"
        self.processed = 0
        self.failed = 0
        self._stop = threading.Event()
        self._hard_stop = threading.Event()
        self._fetchers_done = threading.Event()
        self._keeper_wake = threading.Event()
        self._inbox: queue_module.SimpleQueue[Delivery] = queue_module.SimpleQueue()
        self._capacity = _Capacity(self.capacity)
        self._held: dict[tuple[str, str], _Held] = {}   # claimed and not finished, for the keeper
        self._held_lock = threading.Lock()
        self._counter_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get ``grace`` seconds to finish."""
        self._stop.set()
        self._wake_fetchers()

    def _wake_fetchers(self) -> None:
        # A fetcher may be blocked in BLPOP for up to idle_wait; one token per topic wakes it at
        # once (another worker may take the token instead; it then does one spare claim).
        with contextlib.suppress(redis.RedisError):
            pipe = self.queue.redis.pipeline(transaction=False)
            for topic in self.handlers:
                pipe.rpush(self.queue.keys(topic).signal, "1")
            pipe.execute()

    def run(self, install_signal_handlers: bool = True) -> None:
        """Run until stop() or SIGTERM/SIGINT. A second signal abandons in-flight work at once."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            def on_signal(signum, _frame):
                if self._stop.is_set():
                    self._hard_stop.set()
                log.info("worker %s: %s received, stopping", self.name, signal.Signals(signum).name)
                self._stop.set()
                threading.Thread(target=self._wake_fetchers, daemon=True).start()
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        log.info("worker %s: topics %s, concurrency %d", self.name, ", ".join(self.handlers), self.concurrency)
        fetchers = [threading.Thread(target=self._fetch_loop, args=(t,), name=f"dq-fetch-{t}", daemon=True)
                    for t in self.handlers]
        runners = [threading.Thread(target=self._handle_loop, name=f"dq-handler-{i}", daemon=True)
                   for i in range(self.concurrency)]
        keeper = threading.Thread(target=self._keep_loop, name="dq-keeper", daemon=True)
        for t in (*fetchers, *runners, keeper):
            t.start()
        while not self._stop.wait(0.5):
            pass
        for t in fetchers:
            t.join()
        self._fetchers_done.set()
        deadline = time.monotonic() + self.grace
        for t in runners:
            t.join(max(0.0, deadline - time.monotonic()))
        self._hard_stop.set()
        self._keeper_wake.set()
        keeper.join(5)
        with contextlib.suppress(redis.RedisError):
            self.queue.heartbeat(self.handlers, self.name, remove=True)
        log.info("worker %s stopped: %d processed, %d failed", self.name, self.processed, self.failed)

    # -- fetching ------------------------------------------------------------------------------

    def _fetch_loop(self, topic: str) -> None:
        q = self.queue
        signal_key = q.keys(topic).signal
        failures = 0
        while not self._stop.is_set():
            n = self._capacity.reserve(self.batch_size, self._stop)
            if n == 0:
                break
            try:
                res = q.claim_batch(topic, n, actor=self.name)
                local_ms = time.time() * 1000
                failures = 0
            except redis.RedisError as exc:
                self._capacity.release(n)
                failures += 1
                log.warning("worker %s: claim from %r failed (%s); retrying", self.name, topic, exc)
                self._stop.wait(min(5.0, 0.1 * 2 ** failures))
                continue
            self._capacity.release(n - len(res.deliveries))
            now = time.monotonic()
            with self._held_lock:
                for d in res.deliveries:
                    lease_s = (d.lease_deadline_ms - d.claimed_ms) / 1000
                    self._held[(topic, d.id)] = _Held(d, now, lease_s, now + lease_s)
            if res.deliveries:
                self._keeper_wake.set()
            for d in res.deliveries:
                self._inbox.put(d)
            if len(res.deliveries) == n:
                continue  # maybe more ready: claim again as soon as capacity allows
            self._sleep_until_due(res, local_ms, signal_key)

    def _sleep_until_due(self, res, local_ms: float, signal_key: str) -> None:
        offset_ms = res.now_ms - local_ms               # Redis clock minus local clock
        idle_ms = self.idle_wait * 1000
        due_soon = not res.paused and 0 <= res.next_due_ms <= res.now_ms + idle_ms
        if not due_soon:
            # Nothing due within idle_wait: one blocking wait, woken early by a publish signal.
            # Precision does not matter here, so no local stepping (an idle worker stays cheap).
            self._block(signal_key, idle_ms)
            return
        wait_ms = res.next_due_ms - res.now_ms
        if wait_ms > BLOCK_MARGIN_MS and self._block(signal_key, wait_ms - BLOCK_MARGIN_MS):
            return  # a publish or replay made something ready: claim now
        # The last stretch is slept locally (BLPOP would wake up to 100 ms late), in short steps
        # with a non-blocking look at the signal list between them, so a message that becomes ready
        # meanwhile is not kept waiting for the whole stretch.
        target_local_ms = res.next_due_ms - offset_ms
        while not self._stop.is_set():
            remaining = target_local_ms - time.time() * 1000
            if remaining <= 0:
                return
            self._stop.wait(min(remaining, LOCAL_STEP_MS) / 1000)
            if remaining > LOCAL_STEP_MS:
                try:
                    if self.queue.redis.lpop(signal_key):
                        return
                except redis.RedisError:
                    pass

    def _block(self, signal_key: str, ms: float) -> bool:
        """BLPOP the topic's signal list for up to ``ms``; True when a signal arrived."""
        try:
            return bool(self.queue.redis.blpop([signal_key], timeout=max(ms, 1) / 1000))
        except redis.RedisError as exc:
            log.warning("worker %s: waiting for %s failed (%s)", self.name, signal_key, exc)
            self._stop.wait(min(ms, 1000) / 1000)
            return False

    # -- handling ------------------------------------------------------------------------------

    def _handle_loop(self) -> None:
        acks: list[Delivery] = []
        while not self._hard_stop.is_set():
            try:
                d = self._inbox.get(timeout=0.2)
            except queue_module.Empty:
                self._flush(acks)
                if self._fetchers_done.is_set():
                    break
                continue
            if self._run_handler(d):
                acks.append(d)
            else:
                self._finish(d)
            if len(acks) >= self.batch_size or self._inbox.empty():
                self._flush(acks)
        self._flush(acks)

    def _run_handler(self, d: Delivery) -> bool:
        """True when the message should be acked; failures are nacked or rejected here."""
        handler = self.handlers[d.topic]
        try:
            if d.message.corrupt:
                raise Reject(f"corrupt message: {d.message.corrupt}")
            handler(d.message)
            return True
        except Reject as exc:
            self._settle_failure(d, exc, reject=True)
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            self._settle_failure(d, exc, reject=False)
        return False

    def _settle_failure(self, d: Delivery, exc: BaseException, reject: bool) -> None:
        with self._counter_lock:
            self.failed += 1
        try:
            if reject:
                self.queue.reject(d, exc, actor=self.name)
            else:
                self.queue.nack(d, exc, actor=self.name)
        except LeaseLost:
            log.warning("worker %s: lease on %s/%s lost before nack; it was redelivered", self.name, d.topic, d.id)
        except (QueueError, redis.RedisError) as nack_exc:
            log.error("worker %s: nack of %s/%s failed (%s); it returns after its lease",
                      self.name, d.topic, d.id, nack_exc)

    def _flush(self, acks: list[Delivery]) -> None:
        if not acks:
            return
        batch = list(acks)
        acks.clear()
        try:
            refused = self.queue.ack_many(batch, actor=self.name)
            for d in refused:
                log.warning("worker %s: ack of %s/%s refused: lease lost (handler outlived its lease); "
                            "the message was or will be redelivered", self.name, d.topic, d.id)
        except redis.RedisError as exc:
            log.error("worker %s: ack of %d messages failed (%s); they return after their lease",
                      self.name, len(batch), exc)
        with self._counter_lock:
            self.processed += len(batch)
        with self._held_lock:
            for d in batch:
                self._held.pop((d.topic, d.id), None)
        self._capacity.release(len(batch))

    def _finish(self, d: Delivery) -> None:
        with self._held_lock:
            self._held.pop((d.topic, d.id), None)
        self._capacity.release()

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
                    self.queue.heartbeat(self.handlers, self.name)
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
        """Extend every held lease that is past half its length, by its full length, until the
        message has been held for max_lease (a hung handler then loses it to another worker)."""
        due: dict[str, list[_Held]] = {}
        with self._held_lock:
            for h in self._held.values():
                if now - h.claimed_at <= self.max_lease and h.lease_ends - now < h.lease_s / 2:
                    due.setdefault(h.delivery.topic, []).append(h)
        for group in due.values():
            try:
                results = self.queue.extend_many([h.delivery for h in group], group[0].lease_s)
            except redis.RedisError as exc:
                log.warning("worker %s: extending %d leases failed (%s)", self.name, len(group), exc)
                continue
            for h, deadline in zip(group, results, strict=True):
                if deadline is not None:
                    h.lease_ends = now + h.lease_s
