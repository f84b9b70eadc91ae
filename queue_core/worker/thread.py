"""Worker: runs handlers for one consumer group's claimed messages with N threads.

Threads and why (what each does, the same in both workers, is in rules.py and base.py):
- one *fetcher* per topic (per partition on Redis Cluster) claims into the inbox and blocks in
  Redis until the next due time; the *waker* thread ends that wait on the dot;
- ``concurrency`` *handler* threads run handlers. They never talk to Redis and never poll: each
  waits for a place in the gate (_Gate: how many may run at once), then blocks on the inbox, and
  hands its outcome to the settler. (With every handler thread making its
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

import logging
import queue as queue_module
import signal
import threading
import time
from collections.abc import Callable, Mapping

from ..message import Delivery, Message, Reject
from ..queue import DelayQueue
from ..steps import Steps, run
from .base import RUN_FLUSH, RUN_STUCK, BaseWorker
from .rules import STOP, Waker, batch_result, corrupt_outcomes, push_wakes

log = logging.getLogger("delayq.worker")

Handler = Callable[[Message], None]
BatchHandler = Callable[[list[Message]], Mapping[str, BaseException] | None]


class _Capacity:
    """How many more messages this worker may hold (claimed but not settled)."""

    def __init__(self, size: int):
        self._free = size
        self._needs: list[int] = []   # what each waiting fetcher waits for; releases below all of them wake nobody
        self._cond = threading.Condition()

    def reserve(self, most: int, least: int, stop: threading.Event) -> int:
        """Take up to ``most``, waiting until at least ``least`` are free (0 when stopping)."""
        with self._cond:
            least = min(least, most)
            if self._free < least and not stop.is_set():
                self._needs.append(least)   # each fetcher its own: one's claim never hides another's wait
                try:
                    while self._free < least and not stop.is_set():
                        self._cond.wait()
                finally:
                    self._needs.remove(least)
            if stop.is_set():
                return 0
            n = min(most, self._free)
            self._free -= n
            return n

    def release(self, n: int = 1) -> None:
        if n:
            with self._cond:
                self._free += n
                if self._needs and self._free >= min(self._needs):
                    self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class _Gate:
    """How many handler threads may run handlers at once. More threads cannot run more Python
    (one GIL); they only take turns, and every turn is a thread switch: with a ~4 us handler
    that does one write(2), one worker process draining a backlog spent 18 us of CPU a message
    with one thread, 23 with two and 30 with eight. Threads help only while handlers wait (on
    the network, a database). So, judged every ADAPT_EVERY seconds by whichever thread finishes
    a run or the keeper, while work waits in the inbox, from the process's CPU time (``busy``)
    and how many threads were inside a run on average (``occupied``; the rest waited for work):

    - wider when the threads allowed were all in runs and the process has CPU to spare: to as
      many as that CPU allows at this rate (limit x BUSY_FULL / busy), all of them when handlers
      only wait (a burst of network calls after idle opens to ``concurrency`` in one window);
    - half as many while the process is CPU bound (above BUSY_FULL);
    - half as many when fewer than SPARE of the threads allowed were in runs (the handlers keep
      up with what comes; half of them would too, with fewer switches). Widening needs FULL of
      them in runs, so a steady load does not flip between two limits on this rule.

    It starts at one thread: threads prove they are needed. Judged against one core, a process
    that shares its cores (two workers and Redis on two) never looks CPU bound, so a gate that
    started at ``concurrency`` stayed there for a whole backlog of quick handlers (bench/RESULTS.md,
    session 26: busy 0.39-0.82 in every window of a drain); handlers that wait widen it in one
    window, and while it is narrower than ``concurrency`` with work waiting the keeper judges it
    every window (Worker._gate_tick), so a first burst of network calls waits ~ADAPT_EVERY.

    A handler stuck on one message never holds the last place (at_least, from the keeper). At
    stop the gate opens for good (every thread must take its stop marker)."""

    ADAPT_EVERY = 0.05
    BUSY_FULL = 0.85        # process CPU per wall second: above it, CPU bound
    FULL, SPARE = 0.8, 0.35   # average threads in runs, as a share of the limit

    def __init__(self, most: int):
        self.most = most
        self.limit = 1
        self._active = 0
        self._cond = threading.Condition()
        self._since = time.monotonic()
        self._cpu = time.process_time()
        self._in_runs = 0.0   # seconds handler threads spent in runs since _since
        self._running: dict[int, float] = {}   # thread -> when its run began (or _since, if later)
        self._stopping = False

    def enter(self) -> None:
        with self._cond:
            while self._active >= self.limit:
                self._cond.wait()
            self._active += 1

    def leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._active < self.limit:
                self._cond.notify()

    def over(self) -> bool:
        """More threads hold a place than the limit now allows: one gives its place back (read
        without the lock: a stale answer gives it back one run early or late)."""
        return self._active > self.limit

    def run_began(self) -> None:
        with self._cond:
            self._running[threading.get_ident()] = time.monotonic()

    def run_ended(self) -> None:
        with self._cond:
            began = self._running.pop(threading.get_ident(), None)
            if began is not None:
                self._in_runs += time.monotonic() - began

    def open(self) -> None:
        """Every thread may run, from now on (stopping: each must take its stop marker)."""
        with self._cond:
            self._stopping = True
            self.limit = self.most
            self._cond.notify_all()

    def at_least(self, n: int) -> None:
        """Let at least ``n`` threads run (the keeper: one more than the handlers stuck on one
        message, so that a hung handler never holds the only place while work waits)."""
        with self._cond:
            if self.limit < min(n, self.most):
                self.limit = min(n, self.most)
                self._cond.notify_all()

    def adapt(self, work_waiting: bool) -> bool:
        """Judge the window that ended; True when the gate opened wide (at least twice as many
        threads: the runs the few took should be shared with the others now)."""
        if self._stopping or time.monotonic() - self._since < self.ADAPT_EVERY:
            return False
        with self._cond:
            now = time.monotonic()
            if self._stopping or now - self._since < self.ADAPT_EVERY:
                return False   # stopping, or another thread judged this window meanwhile
            for thread, began in self._running.items():   # runs still going count up to now
                self._in_runs += now - began
                self._running[thread] = now
            wall = max(now - self._since, 1e-6)
            cpu = time.process_time()
            busy, occupied = (cpu - self._cpu) / wall, self._in_runs / wall
            self._since, self._cpu, self._in_runs = now, cpu, 0.0
            if not work_waiting:
                return False   # handlers keep up (or wait for claims): nothing to learn
            before = self.limit
            if occupied >= self.FULL * before and busy < self.BUSY_FULL:
                self.limit = min(self.most, max(before, int(before * self.BUSY_FULL / max(busy, 1e-3))))
                if self.limit > before:
                    self._cond.notify_all()
            elif before > 1 and (busy > self.BUSY_FULL or occupied < self.SPARE * before):
                self.limit = before // 2
            return self.limit >= 2 * before


class Worker(BaseWorker):
    """Consume ``handlers`` = {topic: handler} for one consumer ``group``.

    A handler gets one Message; returning acks it, raising nacks it (retry by the group's policy),
    raising ``Reject`` dead-letters it at once. With ``batch=N`` a handler gets a list of up to N
    messages instead: returning acks them all, except those named in a returned mapping
    ``{message id: exception}`` (a ``Reject`` dead-letters that one, any other exception nacks
    it); raising nacks the whole batch (``Reject``: dead-letters it)."""

    def _make_state(self) -> None:
        self._stop = threading.Event()
        self._hard_stop = threading.Event()
        self._keeper_wake = threading.Event()
        self._inbox: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._fetchers: list[threading.Thread] = []
        self._stop_waking: threading.Thread | None = None   # stop()'s thread that wakes the fetchers
        self._outcomes: queue_module.SimpleQueue = queue_module.SimpleQueue()
        self._capacity = _Capacity(self.capacity)
        self._gate = _Gate(self.concurrency)
        self._held_lock = threading.Lock()
        self._waker = Waker(lambda keys: push_wakes(self.queue.redis, keys), self._hard_stop)

    def _drive(self, routine: Steps):
        return run(routine, self.queue.redis)

    def _drive_own(self, routine: Steps):
        """_drive for a thread that calls the queue in a loop (a fetcher, the settler): its claims
        and acks go out on a connection the thread keeps (DelayQueue._own_connection)."""
        if not isinstance(self.queue, DelayQueue):   # a blocking facade over another client (tests have one)
            return self._drive(routine)
        with self.queue._own_connection():
            return self._drive(routine)

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; in-flight handlers get ``grace`` seconds to finish."""
        self._stop.set()
        self._capacity.wake()
        if self._stop_waking is not None:
            return   # once: a second signal or a crash calls stop() again (no lock: a signal handler calls this)
        self._stop_waking = waking = threading.Thread(target=self._drive, args=(self._waking_fetchers(),), daemon=True)
        waking.start()   # run() returns after it: the caller may close the queue then

    def _thread(self, name: str, target: Callable, *args) -> threading.Thread:
        """A daemon thread that stops the whole worker if its target dies (BaseWorker._crash)."""
        def guarded():
            try:
                target(*args)
            except BaseException as exc:
                self._crash(threading.current_thread().name, exc)
        return threading.Thread(target=guarded, name=name, daemon=True)

    def run(self, install_signal_handlers: bool = True) -> None:
        """Run until stop() or SIGTERM/SIGINT. A second signal abandons in-flight work at once."""
        # What can fail (the scripts' build, a cluster's layout reads) comes before the signal
        # handlers are installed and anything is started.
        self._build_scripts()
        log.info("worker %s: topics %s, group %s, concurrency %d%s", self.name, ", ".join(self.handlers),
                 self.group, self.concurrency, f", batches of {self.batch}" if self.batch else "")
        for topic in self.handlers:
            if self.queue.cluster:
                self._fetched[topic] = set(range(self.queue.layout(topic).partitions))
                self._fetchers += [self._fetcher_thread(topic, p) for p in sorted(self._fetched[topic])]
            else:
                self._fetchers.append(self._thread(f"dq-fetch-{topic}", self._drive_own, self._fetching(topic, None)))
        runners = [self._thread(f"dq-handler-{i}", self._handle_loop) for i in range(self.concurrency)]
        settler = self._thread("dq-settler", self._drive_own, self._settling_loop())
        keeper = self._thread("dq-keeper", self._drive, self._keeping())
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            def on_signal(signum, _frame):
                if self._stop.is_set():
                    self._hard_stop.set()
                log.info("worker %s: %s received, stopping", self.name, signal.Signals(signum).name)
                self.stop()
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        for t in (*self._fetchers, *runners, settler, keeper, self._waker):
            t.start()
        while not self._stop.wait(0.5):   # a timed wait keeps the main thread responsive to signals
            pass
        # Until none is left: a fetcher may have started another (a partition added) meanwhile.
        while alive := [t for t in list(self._fetchers) if t.is_alive()]:
            for t in alive:
                t.join()
        self._drive(self._releasing_unstarted())
        self._gate.open()
        for _ in runners:
            self._inbox.put(STOP)
        deadline = time.monotonic() + self.grace
        for t in runners:
            while t.is_alive() and time.monotonic() < deadline and not self._hard_stop.is_set():
                t.join(min(0.5, max(0.0, deadline - time.monotonic())))
        self._outcomes.put(STOP)
        settler.join(max(5.0, deadline - time.monotonic()))
        self._hard_stop.set()
        self._keeper_wake.set()
        keeper.join(5)
        self._drive(self._leaving())
        if self._stop_waking is not None and self._stop_waking.ident is not None:
            self._stop_waking.join(5)
        self._finish_run()

    def _fetcher_thread(self, topic: str, partition: int) -> threading.Thread:
        return self._thread(f"dq-fetch-{topic}-{partition}", self._drive_own, self._fetching(topic, partition))

    def _start_fetcher(self, topic: str, partition: int) -> None:
        thread = self._fetcher_thread(topic, partition)
        self._fetchers.append(thread)
        thread.start()

    # -- how this worker waits -----------------------------------------------------------------

    def _reserve(self, most: int, least: int = 1) -> int:
        return self._capacity.reserve(most, least, self._stop)

    def _release_capacity(self, n: int) -> None:
        self._capacity.release(n)

    def _pause(self, seconds: float) -> None:
        """Sleep, but end early when the worker stops."""
        self._stop.wait(seconds)

    def _gate_tick(self) -> float:
        # Work waits behind a narrow gate: judge it each window, not only when a run ends (a
        # handler on a long network call ends none for a while).
        if self._gate.limit < self._gate.most and not self._inbox.empty():
            return _Gate.ADAPT_EVERY
        return float("inf")

    def _keeper_sleep(self, seconds: float) -> None:
        self._keeper_wake.wait(seconds)
        # Also here: when every running handler is stuck in a long call, no run ends to widen the gate.
        self._adapt_gate()

    def _freeing_stuck_runs(self, stuck_after: float = RUN_STUCK) -> None:
        super()._freeing_stuck_runs(stuck_after)
        now = time.monotonic()
        stuck = sum(1 for run in list(self._runs.values()) if now - run.since > RUN_STUCK)
        if stuck:
            self._gate.at_least(stuck + 1)

    def _adapt_gate(self) -> None:
        if self._gate.adapt(not self._inbox.empty()):
            # The few threads allowed took runs of several messages each: now that every thread
            # may run, the runs' unstarted rest goes back to the inbox for them.
            self._freeing_stuck_runs(0.0)

    @staticmethod
    def _sleep_rest(seconds: float) -> None:
        time.sleep(seconds)

    def _fetcher_name(self, _topic: str, _parts: list[int]) -> str:
        """What tells this fetcher's wake list from the others': its thread."""
        return f"{self.name}:{threading.get_ident()}"

    # -- handling ------------------------------------------------------------------------------

    def _take(self) -> list[Delivery] | None:
        """The next run of messages (with ``batch``, the next list for one call), all of one
        topic; None to finish."""
        taken = self._inbox.get()
        return None if taken is STOP else taken

    def _handle_loop(self) -> None:
        while not self._hard_stop.is_set():
            # A thread keeps its place in the gate from run to run while the limit allows it:
            # leaving and entering again around each run woke another thread every time.
            self._gate.enter()
            try:
                while not self._hard_stop.is_set():
                    if not self._handle_next():
                        return
                    self._adapt_gate()
                    if self._gate.over():
                        break
            finally:
                self._gate.leave()

    def _handle_next(self) -> bool:
        """Take the next run of messages and handle it; False to finish."""
        taken = self._take()
        if taken is None:
            return False
        self._gate.run_began()
        try:
            self._handle(taken)
        finally:
            self._gate.run_ended()
        return True

    def _handle(self, taken: list[Delivery]) -> None:
        if self.batch:
            with self._batch_running(taken):
                self._outcomes.put(self._run_batch(taken[0].topic, taken))   # one claim's: one topic
            done = len(taken)
        else:
            run, outcomes, done = self._run_of(taken), [], 0
            flushed = run.since
            try:
                while True:
                    try:
                        d = run.popleft()
                    except IndexError:   # done, or the rest went back (stopping) or to others (stuck)
                        break
                    run.since = now = time.monotonic()
                    run.current = d
                    if outcomes and now - flushed > RUN_FLUSH:   # slow handlers: ack as they finish
                        self._outcomes.put(outcomes)
                        outcomes, flushed = [], now
                    outcomes.append((d, self._run_one(d)))
                    done += 1
            finally:
                self._run_ended(run, outcomes)
        # Capacity counts claimed work not yet finished: the fetcher may claim more while the
        # settler acks (the keeper still extends these leases until they are settled).
        self._capacity.release(done)

    def _run_one(self, d: Delivery) -> BaseException | None:
        """None to ack; the exception otherwise (Reject dead-letters)."""
        started = time.perf_counter() if self._timed else 0.0
        try:
            message = d.message
            if message.corrupt:
                raise Reject(f"corrupt message: {message.corrupt}")
            message.check_cancelled()   # cancelled while it waited in this worker: never started
            self.handlers[message.topic](message)
            return None
        except Exception as exc:  # noqa: BLE001 - any handler error is a failed attempt
            return exc
        finally:
            if self._timed:
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
