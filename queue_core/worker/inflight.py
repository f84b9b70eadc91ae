"""What a worker does about work in flight beyond leases: seeing which messages handlers have
been on for a while (their lease is extended at every keeper tick, and extend's answer tells of
``cancel(..., running=True)``), telling handlers of a cancel, and sending what handlers reported
(``message.progress()``, ``message.log()``; queue_core.journal). ``BaseWorker`` (base.py) runs it."""

import contextlib
import logging
from collections.abc import Callable

from ..errors import Code
from ..message import Delivery
from ..steps import Step, Steps
from .rules import RUNNING_CHECK_AFTER

log = logging.getLogger("delayq.worker")


def call(fn: Callable, *args, **kwargs) -> Step:
    """A step of a worker routine: ``fn(*args, **kwargs)`` (awaited by the asyncio worker when
    it returns an awaitable)."""
    return lambda _client: fn(*args, **kwargs)


class InFlight:
    """Mixed into BaseWorker: uses its ``_runs``, ``_held``, ``_held_lock``, ``queue``, ``kind``
    and ``name``."""

    @contextlib.contextmanager
    def _batch_running(self, ds: list[Delivery]):
        """A batch handler call on ``ds``, seen by the keeper as running (RUNNING_CHECK_AFTER)."""
        run = self._run_of([])
        run.current, run.batch = ds, True
        try:
            yield
        finally:
            self._runs.pop(id(run), None)

    def _running_long(self, now: float) -> set[Delivery]:
        """The deliveries handlers have been on for RUNNING_CHECK_AFTER seconds or more."""
        out: set[Delivery] = set()
        for run in list(self._runs.values()):
            current = run.current
            if current is not None and now - run.since >= RUNNING_CHECK_AFTER:
                if isinstance(current, list):
                    out.update(current)
                else:
                    out.add(current)
        return out

    def _cancelled(self, deliveries: list[Delivery]) -> None:
        """An operator cancelled these deliveries while held: their messages say so now
        (``message.cancelled``); the asyncio worker also cancels the handlers' tasks."""
        for d in deliveries:
            log.info("%s %s: %s/%s was cancelled while held; its handler is told to stop", self.kind, self.name,
                     d.topic, d.id)
    def _reporting(self, deliveries: list[Delivery] | None = None) -> Steps:
        """Send what handlers reported (message.progress(), .log()) on the held deliveries (or
        on ``deliveries``): one script call per partition, none while nothing is buffered."""
        if deliveries is None:
            with self._held_lock:
                deliveries = list(self._held)
        buffered = [d for d in deliveries if d.message._journal]
        if not buffered:
            return
        try:
            codes = yield call(self.queue.report, buffered)
        except Exception as exc:  # noqa: BLE001 - a report must never stop the keeper or the settler
            log.warning("%s %s: reporting progress of %d messages failed (%s); their buffered lines are dropped",
                        self.kind, self.name, len(buffered), exc)
            return
        if cancelled := [d for d, code in zip(buffered, codes, strict=True) if code == Code.CANCELLED]:
            self._cancelled(cancelled)
