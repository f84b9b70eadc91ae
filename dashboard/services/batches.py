"""Batches (``q.batch()``): one batch's counts per group, its callbacks and an ETA, and the batch a
message belongs to (the message page links to it)."""

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from queue_core import MessageNotFound

from .engine import get_queue


@dataclass(frozen=True)
class BatchGroupView:
    """One group's count of a batch, with the callbacks as the page shows them."""

    group: str
    total: int
    acked: int
    dead: int
    removed: int
    pending: int
    percent: int
    eta_s: float | None        # seconds until every member ended, at the rate they have ended so far
    callbacks: list[dict]      # kind, topic, fired_at, unsent, failed (why given up), fires (this group fires them)
    stalled_s: float | None = None   # no member ended for this long, well past the batch's pace: no ETA then
    last_end: datetime | None = None  # when a member last ended
    due_at: datetime | None = None    # no member is due before this (a delay, a retry's backoff): not stalled


class UnknownBatch(LookupError):
    """No such batch (or no such group in it), or an id that cannot be one."""


def batch_id(value: str) -> str:
    """A batch id from a URL or form ('' for none); UnknownBatch when it cannot be one."""
    if len(value) > 64 or "|" in value:
        raise UnknownBatch("a batch id is a message-like id of at most 64 characters")
    return value


def dead_in_batch(topic: str, batch: str, group: str) -> int:
    """The batch's members that ended dead in ``group``; UnknownBatch when there is no such batch."""
    try:
        return get_queue().batch_status(topic, batch).of(group).dead
    except (MessageNotFound, KeyError):
        raise UnknownBatch(f"topic {topic} has no batch {batch} in group {group}") from None


def batch_of(topic: str, msg_id: str) -> str | None:
    return get_queue().batch_of(topic, msg_id)


def batch_view(topic: str, batch_id: str):
    """(status, [BatchGroupView]) of a batch, or None when the topic has no such batch."""
    try:
        status = get_queue().batch_status(topic, batch_id)
    except MessageNotFound:
        return None
    now_ms = time.time() * 1000
    views = []
    for g in status.groups.values():
        ended = g.acked + g.dead + g.removed
        # The members end at the rate they have since the batch opened: a plain, honest estimate.
        elapsed_s = max(0.001, (now_ms - status.created_ms) / 1000)
        eta = g.pending / (ended / elapsed_s) if ended and g.pending else (0.0 if not g.pending else None)
        stalled = stalled_for(status.created_ms, g.last_end_ms, ended, now_ms) if g.pending else None
        due_at = None
        if stalled is not None:
            # Quiet is a stall only while members were due: one waiting for its delay or a retry's
            # backoff is not stuck. Asked only here (two bounded round trips), not on every view.
            due_ms = get_queue().batch_next_due(topic, batch_id, group=g.group)
            if due_ms is not None and due_ms > now_ms:
                stalled, due_at = None, _dt(due_ms)
            elif due_ms is not None:
                stalled = stalled_for(status.created_ms, g.last_end_ms, ended, now_ms, due_ms=due_ms)
        if stalled is not None:
            eta = None   # an ETA from the pace it had would be stale: the page says since when nothing ended
        fires = status.group in (None, g.group)
        callbacks = [{"kind": kind, "topic": topic_, "fired_at": _dt(g.fired.get(kind)), "unsent": kind in g.unsent,
                      "failed": g.failed.get(kind), "fires": fires} for kind, (topic_, _payload) in status.callbacks.items()]
        views.append(BatchGroupView(g.group, g.total, g.acked, g.dead, g.removed, g.pending,
                                    int(100 * ended / g.total) if g.total else 100, eta, callbacks, stalled,
                                    _dt(g.last_end_ms), due_at))
    return status, views


STALL_AFTER_S = 60.0   # never called stalled sooner
STALL_GAPS = 3         # ... nor before this many of its usual gaps between two ends went by with none


def stalled_for(created_ms: int, last_end_ms: int | None, ended: int, now_ms: float,
                due_ms: int | None = None) -> float | None:
    """Seconds since a member last ended (since the batch opened when none has) or since its first
    waiting member fell due (``due_ms``, batch_next_due), whichever is later, when that is past
    STALL_AFTER_S and STALL_GAPS times the batch's average gap between ends so far (a slow batch
    whose members end every two minutes is not stalled after one); else None. None too when members
    ended but none recorded when (a batch opened before "|t" was written): no quiet time is known."""
    if ended and last_end_ms is None:
        return None
    since = last_end_ms if last_end_ms is not None else created_ms
    quiet_s = (now_ms - max(since, due_ms or since)) / 1000
    gap_s = (since - created_ms) / 1000 / ended if ended else 0.0
    return quiet_s if quiet_s >= max(STALL_AFTER_S, STALL_GAPS * gap_s) else None


def _dt(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def batch_times(status) -> dict:
    """When the batch was opened and sealed (None: still open), as datetimes."""
    return {"created_at": _dt(status.created_ms), "sealed_at": _dt(status.sealed_ms)}
