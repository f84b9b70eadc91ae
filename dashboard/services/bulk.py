"""Previews of bulk operations, and each kind's scope in words (dashboard.operation_kinds picks
the one for an operation, for its page and its confirmation)."""

import logging

from queue_core import MessageState
from queue_core.keys import partition_of

from .batches import dead_in_batch
from .contracts import DEFAULT_GROUP
from .engine import get_queue
from .messages import message_page

log = logging.getLogger("delayq.dashboard")


def replay_scope_words(topic: str, scope: dict) -> str:
    parts = [f"dead letters of group {scope.get('group', DEFAULT_GROUP)} in {topic}"]
    if scope.get("batch"):
        parts.append(f"members of batch {scope['batch']}")
    if scope.get("fingerprint"):
        parts.append(f"in error group {scope['fingerprint']}")
    if scope.get("since_ms"):
        parts.append(f"dead since {fmt_ms(scope['since_ms'])}")
    parts.append(f"dead by {fmt_ms(scope['cutoff_ms'])}")
    return ", ".join(parts)


def reschedule_words(topic: str, scope: dict) -> str:
    return (f"every {scope.get('state')} message of group {scope.get('group', DEFAULT_GROUP)} in {topic} (due by "
            f"{fmt_ms(scope['cutoff_ms'])} when confirmed), to be due at {fmt_ms(scope['due_ms'])}")


def kill_words(topic: str, scope: dict) -> str:
    return (f"every retrying message of group {scope.get('group', DEFAULT_GROUP)} in {topic} (due by "
            f"{fmt_ms(scope['cutoff_ms'])} when confirmed)")


def purge_words(topic: str, scope: dict) -> str:
    return f"every {scope.get('state')} message of group {scope.get('group', DEFAULT_GROUP)} in {topic}"


def backfill_words(topic: str, scope: dict) -> str:
    """A schedule's backfill (the group does not apply: each tick is one message for every group)."""
    n = scope.get("ticks", 0)
    return (f"the {n:,} tick{'s' if n != 1 else ''} of schedule {scope['schedule']} from {fmt_ms(scope['from_ms'])} "
            f"to {fmt_ms(scope['to_ms'])}, each published to {topic} keyed schedule:{scope['schedule']}:<tick> "
            "unless its message is still there")


def matching_words(topic: str, scope: dict) -> str:
    """Any kind's scope when it acts on a query's matches."""
    words = (f"every {scope.get('state')} message of group {scope.get('group', DEFAULT_GROUP)} in {topic} matching "
             f"“{scope['query']}”")
    if scope.get("partition") is not None:
        words += f" in partition {scope['partition']}"
    if scope.get("since_ms"):
        words += f", scored from {fmt_ms(scope['since_ms'])}"
    words += f" that was there when confirmed ({fmt_ms(scope['confirmed_ms'])})"
    if scope.get("due_ms") is not None:
        words += f", to be due at {fmt_ms(scope['due_ms'])}"
    return words


def matching_preview(topic: str, state: MessageState, query, *, group: str, confirm, partition: int | None = None,
                     since_ms: int | None = None, until_ms: int | None = None) -> dict:
    """The frozen scope of "... all matching" ``query`` in one state of a group (the state's last
    score now as the cutoff, Redis's time as the moment of confirmation), the count (exact when
    the bounded scan reached the end, else a lower bound) and five samples."""
    q = get_queue()
    cutoff = q.purge_cutoff(topic, state, group=group) if state is not MessageState.unacked else None
    scope = {"group": group, "state": state.value, "query": query.text(), "partition": partition,
             "since_ms": since_ms, "cutoff_ms": int(min(float(cutoff), until_ms) if until_ms else float(cutoff))
             if cutoff is not None else 0, "confirmed_ms": q.server_ms()}
    page = q.search(topic, state, query, group=group, partition=partition, since_ms=since_ms,
                    until_ms=scope["cutoff_ms"], limit=1000, confirm=confirm)
    return {"scope": scope, "count": page.matched, "exact": page.done, "scanned": page.scanned, "total": page.total,
            "samples": page.messages[:5], "empty": cutoff is None}


def state_preview(topic: str, state: MessageState, group: str) -> dict:
    """Count and the frozen scope of "reschedule all" / "kill all" on one state of a group: the
    cutoff is the last score in the state now, so a steady inflow cannot keep the operation going."""
    q = get_queue()
    count = q.counts(topic, group=group)[state]
    cutoff = q.purge_cutoff(topic, state, group=group)
    return {"count": count, "scope": {"group": group, "state": state.value,
                                      "cutoff_ms": int(float(cutoff)) if cutoff is not None else 0}}


def fmt_ms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def replay_preview(topic: str, fingerprint: str = "", since_ms: int | None = None,
                   until_ms: int | None = None, group: str = DEFAULT_GROUP, batch: str = "") -> dict:
    """Count and five samples of what "replay all matching" in ``group`` would take, and the frozen
    scope; with ``batch``, the dead letters of that batch (q.batch()) instead."""
    q = get_queue()
    cutoff = min(until_ms, q.server_ms()) if until_ms else q.server_ms()
    if batch:
        scope = {"group": group, "batch": batch, "partition": partition_of(batch), "cutoff_ms": cutoff}
        count = dead_in_batch(topic, batch, group)
        return {"scope": scope, "count": count, "samples": [], "words": replay_scope_words(topic, scope)}
    scope = {"group": group, "fingerprint": fingerprint, "since_ms": since_ms or 0, "cutoff_ms": cutoff}
    count = q.dead_count(topic, fingerprint or None, since_ms or 0, cutoff, group=group)
    samples, _ = message_page(topic, MessageState.dead, after=None, since_ms=since_ms, until_ms=cutoff,
                              fingerprint=fingerprint, limit=5, group=group)
    return {"scope": scope, "count": count, "samples": samples, "words": replay_scope_words(topic, scope)}
