"""What the worker's keeper does at each tick: extend the leases of held messages (and learn of
cancels from the answers), send the heartbeat the dashboard's Workers page reads, and forward the
callbacks of batches that ended. ``BaseWorker`` (base.py) runs ``_keeping`` on a thread or task
of its own."""

import importlib.metadata
import logging
import os
import socket
import time

import redis

from ..steps import Steps
from .inflight import call
from .rules import HEARTBEAT_EVERY, RUNNING_CHECK_EVERY, TRIM_EVERY, keeper_tick, leases_due, report_extended

FORWARD_BUDGET_S = 0.2   # seconds the keeper spends forwarding batch callbacks per topic per heartbeat

log = logging.getLogger("delayq.worker")


def _delayq_version() -> str | None:
    try:
        return importlib.metadata.version("delayq")
    except importlib.metadata.PackageNotFoundError:   # run from a checkout that was never installed
        return None


VERSION = _delayq_version()


class Keeper:
    """Mixed into BaseWorker: uses its ``queue``, ``handlers``, ``group``, ``name``, ``_held``,
    ``_held_lock``, ``_partitions``, the stop events and the subclass's ``_keeper_sleep`` and
    ``_gate_tick``."""

    def _details(self) -> dict:
        """What the heartbeat tells the dashboard's Workers page about this worker."""
        with self._held_lock:
            in_flight = len(self._held)
        return {"host": socket.gethostname(), "pid": os.getpid(), "runtime": self.runtime,
                "concurrency": self.concurrency, "in_flight": in_flight, "started_ms": self.started_ms,
                "version": VERSION}

    def _keeping(self) -> Steps:
        last_beat = forward = 0.0
        beats = 0
        self.started_ms = int(time.time() * 1000)
        while not self._hard_stop.is_set():
            # Woken early when new deliveries arrive, so even the shortest lease is watched at once.
            yield call(self._keeper_sleep, self._keeper_tick())
            self._keeper_wake.clear()
            self._freeing_stuck_runs()
            if self._hard_stop.is_set():
                break
            now = time.monotonic()
            if now - last_beat >= HEARTBEAT_EVERY:
                try:
                    beats += 1
                    beat_ms = yield call(self.queue.heartbeat, self.handlers, self.name, group=self.group,
                                         details=self._details(), trim=beats % TRIM_EVERY == 1)
                    last_beat = forward = now
                except redis.RedisError as exc:
                    log.warning("%s %s: heartbeat failed (%s)", self.kind, self.name, exc)
            yield from self._extending_leases(now)
            if forward == now:   # after the leases: callbacks of batches that ended (engine/batch.py)
                yield from self._forwarding(beat_ms)
            yield from self._reporting()

    def _forwarding(self, now_ms: int) -> Steps:
        """Forward the callbacks of batches that ended (engine/batch.py), for at most
        FORWARD_BUDGET_S a topic: a lease due at the next tick is not kept waiting behind them.
        With the heartbeat's clock (``now_ms``) and the partitions the fetchers read, so an idle
        worker's beat costs no TIME and no layout read more (issue 32: ~2 commands a second)."""
        for topic in self.handlers:
            try:
                yield call(self.queue.forward_batch_callbacks, topic, budget_s=FORWARD_BUDGET_S, now_ms=now_ms,
                           partition_count=self._partitions.get(topic))
            except redis.RedisError as exc:
                log.warning("%s %s: batch callbacks of %s not forwarded (%s)", self.kind, self.name, topic, exc)

    def _keeper_tick(self) -> float:
        """Tick often enough that every held lease is checked at least 4 times per lease length,
        and the thread worker's handler gate each window it asks for (``_gate_tick``)."""
        with self._held_lock:
            shortest = min((h.lease_s for h in set(self._held.values())), default=4.0)
            holding = bool(self._held)
        tick = keeper_tick(shortest)
        if holding:
            tick = min(tick, RUNNING_CHECK_EVERY)
        self._keeper_tick_s = min(tick, self._gate_tick())
        return self._keeper_tick_s

    def _extending_leases(self, now: float) -> Steps:
        """Extend every held lease that is past half its length, and those of messages handlers
        have been on for a while, by its full length (leases_due); the answers tell of cancels."""
        running = self._running_long(now)
        with self._held_lock:
            due = leases_due(list(self._held.items()), now, self.max_lease, running)
        for lease_s, held in due.items():
            try:
                results = yield call(self.queue.extend_many, [d for d, _ in held], lease_s)
            except redis.RedisError as exc:
                log.warning("%s %s: extending %d leases failed (%s)", self.kind, self.name, len(held), exc)
                continue
            report_extended(self.metrics, held, results, now)
            if cancelled := [d for d, _ in held if d.message._cancel is not None]:
                self._cancelled(cancelled)
