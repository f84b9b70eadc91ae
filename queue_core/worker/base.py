"""``BaseWorker``: what the thread ``Worker`` and the ``AsyncWorker`` do alike — the ``__init__``
validation, claiming (the fetch loop and its sleep until the next due time), settling, giving
back unstarted messages, waking fetchers and leaving at stop; the keeper's leases and heartbeats
are keeper.py's, the rules of work in flight inflight.py's.

Those routines are written once, as generators over steps (queue_core.steps): each
``yield call(f, ...)`` is a call that blocks in the thread worker and is awaited in the asyncio
one; ``_drive`` runs a routine either way. A subclass keeps only what truly differs: its threads
or tasks, how it waits (``_reserve``, ``_pause``, ``_keeper_sleep``, ``_sleep_rest``), and the
handler call itself, a plain call or an await (as a step it would cost a routine per message
and put the driver's frames in every traceback a failed handler leaves on its message).
"""

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping

import redis

from ..errors import InvalidArgument, QueueError, WorkerCrashed
from ..ids import new_id
from ..keys import DEFAULT_GROUP, validate_group, wake_key
from ..message import Delivery
from ..steps import Steps
from .inflight import InFlight, call
from .keeper import Keeper
from .rules import (
    CLAIM_MOST,
    EMPTY,
    LAYOUT_EVERY,
    NO_METRICS,
    RUNNING_CHECK_EVERY,
    STOP,
    WAKE_EARLY_MS,
    ClaimSize,
    FetchSchedule,
    HeldClaim,
    NoMetrics,
    hold,
    inbox_items,
    keeper_tick,
    report_acks,
    report_nacks,
    split_outcomes,
    unstarted,
    waking,
)

log = logging.getLogger("delayq.worker")

RUN_STUCK = 0.5    # seconds on one message after which the rest of its run goes to other handlers
RUN_FLUSH = 0.02   # seconds of a run after which its finished outcomes go to the settler (acked)
# The Lua scripts a worker calls (engine/consume.py; publish: the callbacks of batches that end,
# forwarded by the settler and the keeper). Each is assembled from lua/ and registered at its
# first use in a process (queue_core.scripts): ~50 ms for claim, ~10 for nack or publish. run()
# builds them before the first claim, so the first failed handler's nack does not hold the
# settler (in an AsyncWorker, the event loop) that long mid-run.
WORKER_SCRIPTS = ("claim", "ack", "nack", "release", "extend", "report", "publish")


class Run(deque):
    """A run of messages one handler takes (rules.inbox_items); ``since``: when it started the
    message it is on, ``current``: that delivery (a batch handler's: the list), ``task``: the
    asyncio task running it (cancelled when an operator cancels the message)."""

    since: float
    current: Delivery | list[Delivery] | None = None
    task = None
    batch = False

    def take_rest(self) -> list[Delivery]:
        """Every message still in the run, taken out (popleft is atomic: each message leaves the
        run once, to its handler or to whoever takes the rest)."""
        rest = []
        while True:
            try:
                rest.append(self.popleft())
            except IndexError:
                return rest


class BaseWorker(InFlight, Keeper):
    """Consume ``handlers`` = {topic: handler} for one consumer ``group``; see Worker and
    AsyncWorker for what a handler gets and returns."""

    kind = "worker"                 # how the logs name it
    unit = "thread"                 # what runs each loop, for the crash report
    runtime = "threads"             # what the Workers page says it runs on
    wake_early_ms = WAKE_EARLY_MS   # how long before a due time the waker ends a fetcher's wait
    # The thread worker guards its held messages with a lock; one event loop needs none.
    _held_lock = contextlib.nullcontext()

    def __init__(self, queue, handlers: Mapping[str, Callable], *, group: str = DEFAULT_GROUP,
                 concurrency: int = 8, prefetch: int | None = None, batch_size: int | None = None,
                 batch: int | None = None,
                 max_lease: float = 3600.0, grace: float = 30.0, idle_wait: float = 2.0, name: str | None = None,
                 metrics: NoMetrics | None = None):
        self._check_queue(queue)
        if not handlers:
            raise InvalidArgument("a worker needs at least one topic handler")
        if concurrency < 1:
            raise InvalidArgument("concurrency must be at least 1")
        if batch is not None and not 1 <= batch <= 1000:
            raise InvalidArgument("batch must be between 1 and 1000 messages")
        for topic, handler in handlers.items():
            queue.keys(topic)  # validates the name now, not in a thread or task later
            self._check_handler(topic, handler)
        self.queue = queue
        self.group = validate_group(group)
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.batch = batch
        if batch_size is not None and batch_size < 1:
            raise InvalidArgument("batch_size must be at least 1")
        if prefetch is not None and prefetch < 0:
            raise InvalidArgument("prefetch cannot be negative")
        per_handler = batch or 1
        # Unset, both adapt (rules.ClaimSize): claims grow to CLAIM_MOST while there is a backlog
        # and the worker may hold two of them unstarted; unstarted prefetch goes back at once on
        # stop (release()).
        self.batch_size = max(batch_size or CLAIM_MOST, per_handler)
        self.capacity = concurrency * per_handler + (prefetch if prefetch is not None else 2 * self.batch_size)
        self._claim_fixed = batch_size is not None
        self.max_lease = max_lease
        self.grace = grace
        self.idle_wait = idle_wait
        self.name = name or f"{queue.actor}:{new_id()[-6:]}"
        self.processed = 0
        self.failed = 0
        self.crashed: str | None = None     # "thread or task name: error" of a loop that died
        self._held: dict[Delivery, HeldClaim] = {}   # claimed and not settled, for the keeper
        self._runs: dict[int, Run] = {}   # runs of messages handlers are going through (_run_of)
        self._keeper_tick_s = 1.0   # how often the keeper looks at leases now (_keeper_tick)
        self._wake_keys: set[str] = set()
        self._partitions: dict[str, int] = {}   # each topic's partition count, as its fetcher last read it
        self._fetched: dict[str, set[int]] = {}   # on Redis Cluster: each topic's partitions that have a fetcher
        self.started_ms: int | None = None   # when run() began, by this machine's clock
        self.metrics = metrics or NO_METRICS      # queue_core.contrib.metrics.WorkerMetrics for --metrics-port
        self._timed = self.metrics is not NO_METRICS   # without metrics a handler call is not timed
        self.metrics.watch_in_flight(lambda: len(self._held))
        self._make_state()

    def _make_state(self) -> None:
        """The subclass's own events, queues and capacity (the asyncio ones are made in run():
        an asyncio object belongs to a loop)."""

    def _check_queue(self, queue) -> None:
        """Refuse a client of the wrong kind (the asyncio worker needs the asyncio client)."""

    def _check_handler(self, topic: str, handler: Callable) -> None:
        """Refuse a handler this worker cannot call."""

    def _crash(self, where: str, exc: BaseException) -> None:
        """A loop died: stop the whole worker, loudly. A worker missing its fetcher or settler
        would keep its heartbeat and claim nothing (or never ack) without a word."""
        self.crashed = f"{where}: {exc!r}"
        log.critical("%s %s: %s %s failed; stopping the worker", self.kind, self.name, self.unit, where,
                     exc_info=True)
        self.stop()

    def _build_scripts(self) -> None:
        """Assemble and register the scripts this worker calls (WORKER_SCRIPTS): no Redis command."""
        for name in WORKER_SCRIPTS:
            getattr(self.queue.scripts, name)

    def _finish_run(self) -> None:
        """Say the worker stopped; a loop that died makes run() raise."""
        log.info("%s %s stopped: %d processed, %d failed", self.kind, self.name, self.processed, self.failed)
        if self.crashed:
            raise WorkerCrashed(f"worker {self.name} stopped because its {self.unit} {self.crashed} failed; "
                                "restart it (messages it held return after their lease)")

    def _signal_keys(self, topic: str, partitions) -> list[str]:
        return [self.queue.keys(topic, p, self.group).signal for p in partitions]

    # -- stopping ------------------------------------------------------------------------------

    def _waking_fetchers(self) -> Steps:
        # A fetcher may be blocked in BLPOP for up to idle_wait: its own wake list ends a wait for a
        # due time, and one token per partition a wait for a publish (another worker may take that
        # token instead; it then does one spare claim).
        with contextlib.suppress(redis.RedisError):
            for key in list(self._wake_keys):
                yield from waking([key])
            for topic in self.handlers:
                layout = yield call(self.queue.layout, topic)
                for key in self._signal_keys(topic, range(layout.partitions)):
                    yield call(self.queue.redis.rpush, key, "1")

    def _releasing_unstarted(self) -> Steps:
        """Claimed but never started: back to ready now, the attempt not counted."""
        items = []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except EMPTY:
                break
        waiting = unstarted(items)
        for run in list(self._runs.values()):   # what handlers took in runs and have not started yet
            waiting += run.take_rest()
        if not waiting:
            return
        self._release_capacity(len(waiting))
        try:
            n = yield call(self.queue.release, waiting, actor=self.name)
            log.info("%s %s: %d claimed but unstarted messages given back", self.kind, self.name, n)
        except (QueueError, redis.RedisError) as exc:
            log.warning("%s %s: giving back %d unstarted messages failed (%s); they return after their "
                        "lease", self.kind, self.name, len(waiting), exc)
        self._forget(waiting)

    def _leaving(self) -> Steps:
        """The last words at stop: off the dashboard's worker list, own wake lists deleted."""
        with contextlib.suppress(redis.RedisError):
            yield call(self.queue.heartbeat, self.handlers, self.name, remove=True, group=self.group)
            for key in self._wake_keys:
                yield call(self.queue.redis.delete, key)

    # -- fetching ------------------------------------------------------------------------------

    def _fetching(self, topic: str, only: int | None) -> Steps:
        """Claim for ``topic`` from every partition (``only`` None) or from one."""
        q = self.queue
        schedule = FetchSchedule(self.idle_wait)
        size = ClaimSize(self.batch_size, self.concurrency * (self.batch or 1), self.capacity, self._claim_fixed)
        failures = 0
        parts: list[int] = []
        layout_checked = -LAYOUT_EVERY
        new_count = None   # a partition count read after a claim named another one (below)
        while not self._stop.is_set():
            if new_count is not None or time.monotonic() - layout_checked >= LAYOUT_EVERY:
                if new_count is None:
                    try:
                        count = (yield call(q.layout, topic, fresh=True)).partitions
                    except redis.RedisError as exc:
                        # Redis down or failing over: the fetcher must outlive it, as the claims below do.
                        failures += 1
                        log.warning("%s %s: reading %r's layout failed (%s); retrying", self.kind, self.name, topic,
                                    exc)
                        yield call(self._pause, min(5.0, 0.1 * 2 ** failures))
                        continue
                else:
                    count, new_count = new_count, None
                self._partitions[topic] = count
                parts = [p for p in range(count) if only is None or p == only]
                layout_checked = time.monotonic()
                if not parts:
                    # This partition no longer exists; should it come back, partition 0's fetcher
                    # starts another for it (_fetch_new_partitions).
                    self._fetched.get(topic, set()).discard(only)
                    return
                if only == 0:
                    self._fetch_new_partitions(topic, count)
            n = yield call(self._reserve, size.want, size.least())
            if n == 0:
                break
            now_r = schedule.now_r()
            remaining, more, record_bytes, relayout = n, False, 0, False
            try:
                for p in schedule.order(parts):
                    if schedule.waiting(p, now_r):
                        continue
                    if remaining == 0:
                        more = True
                        break
                    sent = time.time()
                    res = yield call(q.claim_batch, topic, remaining, actor=self.name, group=self.group, partition=p)
                    relayout = relayout or res.partitions is not None and res.partitions != count
                    if res.throttled:
                        self.metrics.waited(topic)
                    more = schedule.claimed(p, res, remaining, sent) or more
                    remaining -= len(res.deliveries)
                    record_bytes += self._dispatch(res.deliveries)
                failures = 0
            except redis.RedisError as exc:
                failures += 1
                log.warning("%s %s: claim from %r failed (%s); retrying", self.kind, self.name, topic, exc)
                self._release_capacity(remaining)
                yield call(self._pause, min(5.0, 0.1 * 2 ** failures))
                continue
            self._release_capacity(remaining)
            size.claimed(n, n - remaining, more, record_bytes)
            if relayout:
                # A claim named another partition count: repartitioned (configure_topic signals
                # every group's partitions, so a waiting fetcher claims at once). Take the new
                # layout now, not up to LAYOUT_EVERY later, and claim again before waiting (the new
                # partitions may hold due work). Read from partition 0, the layout's source: a
                # partition whose copy is behind costs a read a claim, never a loop; read after
                # the claimed messages went to the handlers, so a failed read strands none.
                with contextlib.suppress(redis.RedisError):
                    if (read := (yield call(q.layout, topic, fresh=True)).partitions) != count:
                        new_count, more = read, True   # taken at the loop's top, not read again there
            if not more:
                yield from self._sleeping_until_due(topic, parts, schedule)

    def _fetch_new_partitions(self, topic: str, count: int) -> None:
        """On Redis Cluster each partition has a fetcher of its own (a blocking wait cannot span hash
        slots); partition 0's starts one for each partition added since (configure_topic), which
        would otherwise never be claimed from until the worker restarted."""
        fetched = self._fetched.get(topic)
        if fetched is None:
            return   # one fetcher serves every partition
        for p in range(count):
            if p not in fetched and not self._stop.is_set():
                fetched.add(p)
                log.info("%s %s: topic %r has partition %d now; fetching from it", self.kind, self.name, topic, p)
                self._start_fetcher(topic, p)

    def _start_fetcher(self, topic: str, partition: int) -> None:
        """Start one more fetcher (a thread, a task) for ``partition`` of ``topic``."""
        raise NotImplementedError

    def _dispatch(self, deliveries: list[Delivery]) -> int:
        """Hold the claimed deliveries and hand them to the handlers; their records' bytes."""
        if not deliveries:
            return 0
        with self._held_lock:
            size = hold(self._held, deliveries, self.metrics)
            # Read now: once in the inbox, a message may be handled, acked and forgotten at once.
            lease_s = self._held[deliveries[0]].lease_s
        for item in inbox_items(deliveries, self.batch, self.concurrency):
            self._inbox.put_nowait(item)
        if min(keeper_tick(lease_s), RUNNING_CHECK_EVERY, self._gate_tick()) < self._keeper_tick_s:
            # A lease shorter than the keeper's tick watches, a worker that was idle, or a narrow
            # gate with work waiting: watch at once (after the inbox is filled: the thread
            # worker's tick depends on work waiting there).
            self._keeper_wake.set()
        return size

    def _gate_tick(self) -> float:
        """How often the keeper must judge the handler gate now (the thread Worker's; none here)."""
        return float("inf")

    def _sleeping_until_due(self, topic: str, parts: list[int], schedule: FetchSchedule) -> Steps:
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
            schedule.signalled(parts, keys, (yield from self._blocking(keys, wait_ms)))
            return
        own = wake_key(keys[0], self._fetcher_name(topic, parts))
        self._wake_keys.add(own)
        self._waker.set(own, (next_r - schedule.offset_ms - self.wake_early_ms) / 1000)
        try:
            # The timeout is only a backstop (the waker normally ends the wait at the due time).
            woke = yield from self._blocking([*keys, own], wait_ms + 1000)
        finally:
            self._waker.clear(own)
        schedule.signalled(parts, keys, woke)
        if woke == own and (rest := schedule.rest_after_wake(next_r)):
            yield call(self._sleep_rest, rest)

    def _blocking(self, keys: list[str], ms: float) -> Steps:
        """BLPOP the signal lists for up to ``ms``; the key that was signalled, or None."""
        try:
            got = yield call(self.queue.redis.blpop, keys, timeout=max(ms, 1) / 1000)
            return got[0].decode() if got else None
        except redis.RedisError as exc:
            log.warning("%s %s: waiting for a signal failed (%s)", self.kind, self.name, exc)
            yield call(self._pause, min(ms, 1000) / 1000)
            return None

    # -- settling ------------------------------------------------------------------------------

    def _settling_loop(self) -> Steps:
        """Ack and nack for every handler: whatever finished since the last call, in one script
        call per partition. Blocks while nothing finished (no timed polling)."""
        finishing = False
        while not finishing:
            first = yield call(self._outcomes.get)
            batch = []
            if first is STOP:
                finishing = True
            else:
                batch += first
            while len(batch) < 1000:
                try:
                    item = self._outcomes.get_nowait()
                except EMPTY:
                    break
                if item is STOP:
                    finishing = True
                    break
                batch += item
            if batch:
                yield from self._settling(batch)

    def _settling(self, outcomes: list[tuple[Delivery, BaseException | None]]) -> Steps:
        acks, failures = split_outcomes(outcomes)
        if acks:
            try:
                report_acks(self, acks, (yield call(self.queue.ack_many, acks, actor=self.name)))
            except (QueueError, redis.RedisError) as exc:
                log.error("%s %s: ack of %d messages failed (%s); they return after their lease",
                          self.kind, self.name, len(acks), exc)
            self.processed += len(acks)   # one settler: no lock needed
        if failures:
            self.failed += len(failures)
            # The last lines before the error stay with the retrying or dead message (an acked
            # message's journal goes with it, so acks never wait for one).
            yield from self._reporting([f.delivery for f in failures])
            try:
                report_nacks(self, failures, (yield call(self.queue.nack_many, failures, actor=self.name)))
            except (QueueError, redis.RedisError) as exc:
                log.error("%s %s: nack of %d messages failed (%s); they return after their lease",
                          self.kind, self.name, len(failures), exc)
        self._forget([d for d, _ in outcomes])

    def _run_of(self, taken: list[Delivery]) -> "Run":
        """A run of messages a handler goes through one by one, left where others find the ones
        not yet started: a stopping worker gives them back at once (_releasing_unstarted), the
        keeper hands them to other handlers when this one is stuck on a message
        (_freeing_stuck_runs)."""
        run = Run(taken)
        run.since = time.monotonic()
        self._runs[id(run)] = run
        return run

    def _freeing_stuck_runs(self, stuck_after: float = RUN_STUCK) -> None:
        """The unstarted rest of a run whose handler has been on one message for RUN_STUCK
        seconds (``stuck_after``) goes back to the inbox for the other handlers, cut into runs
        as a claim's are (one list would go to one handler); each message leaves the run once:
        popleft is atomic."""
        if self._stop is not None and self._stop.is_set():
            return   # the unstarted went back to ready at stop (_releasing_unstarted): none queued behind the stop markers
        now = time.monotonic()
        for run in list(self._runs.values()):
            if run and now - run.since >= stuck_after and (rest := run.take_rest()):
                self._requeue(rest)

    def _requeue(self, rest: list[Delivery]) -> None:
        """Unstarted messages a handler's run gave up, back to the inbox cut into runs as a
        claim's are (one list would go to one handler again)."""
        for item in inbox_items(rest, self.batch, self.concurrency):
            self._inbox.put_nowait(item)

    def _run_ended(self, run: "Run", outcomes: list) -> None:
        """A handler left its run: what it finished goes to the settler, and what it did not
        start (it raised something no handler error is, or was stopped) back to the inbox."""
        self._runs.pop(id(run), None)
        if outcomes:
            self._outcomes.put_nowait(outcomes)
        if rest := run.take_rest():
            self._requeue(rest)

    def _forget(self, deliveries: list[Delivery]) -> None:
        with self._held_lock:
            for d in deliveries:
                self._held.pop(d, None)
