"""Previews of bulk operations, and each kind's scope in words (dashboard.operation_kinds picks
the one for an operation, for its page and its confirmation)."""

import logging

from queue_core import MessageState

from .contracts import DEFAULT_GROUP
from .engine import get_queue
from .messages import message_page

log = logging.getLogger("delayq.dashboard")


def replay_scope_words(topic: str, scope: dict) -> str:
    parts = [f"dead letters of group {scope.get('group', DEFAULT_GROUP)} in {topic}"]
    if scope.get("fingerprint"):
        parts.append(f"in error group {scope['fingerprint']}")
    if scope.get("since_ms"):
        parts.append(f"dead since {_fmt_ms(scope['since_ms'])}")
    parts.append(f"dead by {_fmt_ms(scope['cutoff_ms'])}")
    return ", ".join(parts)


def reschedule_words(topic: str, scope: dict) -> str:
    return (f"every {scope.get('state')} message of group {scope.get('group', DEFAULT_GROUP)} in {topic} (due by "
            f"{_fmt_ms(scope['cutoff_ms'])} when confirmed), to be due at {_fmt_ms(scope['due_ms'])}")


def kill_words(topic: str, scope: dict) -> str:
    return (f"every retrying message of group {scope.get('group', DEFAULT_GROUP)} in {topic} (due by "
            f"{_fmt_ms(scope['cutoff_ms'])} when confirmed)")


def purge_words(topic: str, scope: dict) -> str:
    return f"every {scope.get('state')} message of group {scope.get('group', DEFAULT_GROUP)} in {topic}"


def state_preview(topic: str, state: MessageState, group: str) -> dict:
    """Count and the frozen scope of "reschedule all" / "kill all" on one state of a group: the
    cutoff is the last score in the state now, so a steady inflow cannot keep the operation going."""
    q = get_queue()
    count = q.counts(topic, group=group)[state]
    cutoff = q.purge_cutoff(topic, state, group=group)
    return {"count": count, "scope": {"group": group, "state": state.value,
                                      "cutoff_ms": int(float(cutoff)) if cutoff is not None else 0}}


def _fmt_ms(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def replay_preview(topic: str, fingerprint: str = "", since_ms: int | None = None,
                   until_ms: int | None = None, group: str = DEFAULT_GROUP) -> dict:
    """Count and five samples of what "replay all matching" in ``group`` would take, and the frozen scope."""
    q = get_queue()
    cutoff = min(until_ms, q.server_ms()) if until_ms else q.server_ms()
    scope = {"group": group, "fingerprint": fingerprint, "since_ms": since_ms or 0, "cutoff_ms": cutoff}
    count = q.dead_count(topic, fingerprint or None, since_ms or 0, cutoff, group=group)
    samples, _ = message_page(topic, MessageState.dead, after=None, since_ms=since_ms, until_ms=cutoff,
                              fingerprint=fingerprint, limit=5, group=group)
    return {"scope": scope, "count": count, "samples": samples, "words": replay_scope_words(topic, scope)}
