"""The scheduler loop: fires schedules' ticks (DelayQueue.tick_schedule). Run as many as you like
(``delayq scheduler``, or ``delayq worker --schedules`` inside workers): each tick is decided by one
atomic script on Redis's clock, so schedulers race harmlessly and no leader is elected.

Each loop reads, for every partition that homes schedules, its earliest due entries (one
pipelined round trip: ZRANGE of a few dozen per partition, O(log n)), fires those due, and
sleeps until the earliest next one, at most ``max_sleep`` seconds (new schedules are noticed
through the registry's version counter, one GET per loop). The sleep is local and corrected for
the offset between this host's clock and Redis ``TIME`` (measured every 30 s), so ticks are
fired within milliseconds instead of on a polling grid.
"""

import logging
import threading
import time

from .engine.ticks import Due
from .keys import schedules_registry_key, schedules_version_key

log = logging.getLogger("delayq.scheduler")
PEEK = 64               # due entries read per home partition per loop
OFFSET_EVERY = 30.0     # seconds between clock-offset measurements
BUFFER_RECHECK_MS = 250  # as in lua/schedule_tick.lua: a buffered tick's next look
REFUSED_RETRY_MS = 5000  # a tick publish refused (too large, too long a delay) is tried again this much later


class Scheduler:
    """Fires the ticks of every schedule in ``queue``'s Redis. ``run()`` blocks until ``stop()``;
    ``start()`` runs it in a daemon thread (what ``delayq worker --schedules`` does)."""

    def __init__(self, queue, *, max_sleep: float = 1.0, actor: str | None = None):
        self.queue = queue
        self.max_sleep = max_sleep
        self.actor = actor or f"scheduler:{queue.actor}"
        self._stop = threading.Event()
        self._version: bytes | None = b"?"
        self._homes: list[tuple[str, int]] = []
        self._definitions: dict[str, bytes] = {}   # name -> stored definition, until the version moves
        self._next: dict[str, int] = {}            # name -> its next tick as the last script call said
        self._refused: dict[str, float] = {}       # name -> when to try a tick publish refused again
        self._offset_ms = 0.0
        self._offset_at = 0.0
        self.fired = 0
        self._thread: threading.Thread | None = None

    def stop(self) -> None:
        self._stop.set()

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, kwargs={"install_signal_handlers": False},
                                        name="dq-scheduler", daemon=True)
        self._thread.start()
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self, install_signal_handlers: bool = True) -> None:
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            import signal

            def on_signal(signum, _frame):
                log.info("scheduler: %s received, stopping", signal.Signals(signum).name)
                self.stop()
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        log.info("scheduler %s running", self.actor)
        while not self._stop.is_set():
            try:
                wait = self.loop_once()
            except Exception:  # noqa: BLE001 - a scheduler outlives Redis restarts and bad schedules
                log.exception("scheduler loop failed; retrying in 1 s")
                wait = 1.0
            if wait > 0:
                self._stop.wait(wait)

    def _redis_now(self) -> float:
        """Redis's clock (ms) estimated locally."""
        now = time.time()
        if now - self._offset_at > OFFSET_EVERY:
            before = time.time()
            sec, usec = self.queue.redis.time()
            after = time.time()
            self._offset_ms = sec * 1000 + usec / 1000 - (before + after) / 2 * 1000
            self._offset_at = after
            now = after
        return now * 1000 + self._offset_ms

    def _refresh_homes(self) -> None:
        r = self.queue.redis
        version = r.get(schedules_version_key(self.queue.prefix))
        if version == self._version:
            return
        homes = set()
        cursor = 0
        while True:   # HSCAN: bounded per call
            cursor, chunk = r.hscan(schedules_registry_key(self.queue.prefix), cursor, count=1000)
            for raw in chunk.values():
                topic, _, p = raw.decode().rpartition("|")
                homes.add((topic, int(p)))
            if not cursor:
                break
        self._homes = sorted(homes)
        self._version = version
        self._definitions.clear()   # an upsert or delete moved the version: definitions may have changed
        self._next.clear()

    def loop_once(self) -> float:
        """Fire what is due; return how long to sleep (seconds)."""
        self._refresh_homes()
        if not self._homes:
            return self.max_sleep
        q = self.queue
        pipe = q.redis.pipeline(transaction=False)
        for topic, p in self._homes:
            pipe.zrange(q.keys(topic, p).p.schedule_due, 0, PEEK - 1, withscores=True)
        replies = pipe.execute()
        now = self._redis_now()
        due: list[tuple[str, str, int, int]] = []
        earliest = None
        for (topic, p), entries in zip(self._homes, replies, strict=True):
            for name, score in entries:
                if score <= now:
                    due.append((name.decode(), topic, p, int(score)))
                else:
                    earliest = score if earliest is None else min(earliest, score)
                    break
        if not due:
            return self._sleep(earliest)
        missing = [(n, t, p) for n, t, p, _ in due if n not in self._definitions]
        if missing:
            pipe = q.redis.pipeline(transaction=False)
            for n, t, p in missing:
                pipe.hget(q.keys(t, p).p.schedules, n)
            for (n, _t, _p), raw in zip(missing, pipe.execute(), strict=True):
                if raw is not None:
                    self._definitions[n] = raw
        now = self._redis_now()
        batch = [Due(n, t, p, self._next.get(n, score), self._definitions[n])
                 for n, t, p, score in due if n in self._definitions and self._refused.get(n, 0) <= now]
        if not batch:
            waits = [t for t in (earliest, *self._refused.values()) if t is not None and t > now]
            return self._sleep(min(waits) if waits else None)
        again = len(due) >= PEEK
        for d, result in zip(batch, q.tick_schedules(batch, int(now), actor=self.actor), strict=True):
            if result.outcome == "fired":
                self.fired += 1
            if result.outcome != "refused":
                self._refused.pop(d.name, None)
            if result.outcome in ("gone", "idle"):
                self._next.pop(d.name, None)
                continue
            if result.next_ms is not None:
                self._next[d.name] = result.next_ms
            look = None
            if result.outcome == "refused":
                # Publish refused the tick (payload over the topic's cap, jitter past max_delay):
                # nothing was written; try again later rather than in a tight loop, and say why.
                log.error("schedule %s: its tick was refused by publish (code %s); fix the schedule or the topic's "
                          "limits; retrying in %g s", d.name, result.tick_ms, REFUSED_RETRY_MS / 1000)
                self._refused[d.name] = self._redis_now() + REFUSED_RETRY_MS
                look = self._refused[d.name]
            elif result.outcome == "not_due":
                look = result.tick_ms
            elif result.outcome in ("buffered", "waiting"):
                look = self._redis_now() + BUFFER_RECHECK_MS   # schedule_tick.lua looks again then
            elif result.outcome == "stale":
                again = True          # someone else moved it: ask again with the next tick it said
            elif result.next_ms is not None:
                look = result.next_ms
                again = again or result.next_ms <= self._redis_now()
            if look is not None:
                earliest = look if earliest is None else min(earliest, look)
        return 0.0 if again else self._sleep(earliest)

    def _sleep(self, earliest: float | None) -> float:
        if earliest is None:
            return self.max_sleep
        return min(self.max_sleep, max(0.0005, (earliest - self._redis_now()) / 1000))
