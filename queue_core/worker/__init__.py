"""The workers: ``Worker`` (threads, thread.py) and ``AsyncWorker`` (asyncio, async_worker.py),
both on ``BaseWorker`` (base.py) and the rules they share (rules.py). ``queue_core.worker`` was one
module before; every name imported from it then still is."""

from .async_worker import ASYNC_WAKE_EARLY_MS, AsyncHandler, AsyncWorker, is_async_callable
from .base import BaseWorker
from .rules import (
    HEARTBEAT_EVERY,
    LAYOUT_EVERY,
    NO_METRICS,
    WAKE_EARLY_MS,
    FetchSchedule,
    HeldClaim,
    NoMetrics,
    Waker,
    batch_result,
    corrupt_outcomes,
    hold,
    inbox_items,
    leases_due,
    push_wakes,
    report_acks,
    report_extended,
    report_nacks,
    split_outcomes,
    unstarted,
)
from .thread import BatchHandler, Handler, Worker

__all__ = [
    "ASYNC_WAKE_EARLY_MS", "HEARTBEAT_EVERY", "LAYOUT_EVERY", "NO_METRICS", "WAKE_EARLY_MS", "AsyncHandler",
    "AsyncWorker", "BaseWorker", "BatchHandler", "FetchSchedule", "Handler", "HeldClaim", "NoMetrics", "Waker",
    "Worker", "batch_result", "corrupt_outcomes", "hold", "inbox_items", "is_async_callable", "leases_due",
    "push_wakes", "report_acks", "report_extended", "report_nacks", "split_outcomes", "unstarted",
]
