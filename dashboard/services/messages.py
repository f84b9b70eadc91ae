"""Pages of messages, their scores, the redaction rules and retry previews that go with them."""

import logging

from queue_core import MessageState

from .contracts import DEFAULT_GROUP, position_cursor
from .engine import get_queue

log = logging.getLogger("delayq.dashboard")


# -- messages --------------------------------------------------------------------------------------

def message_page(topic: str, state: MessageState, *, after: str | None, search: str = "",
                 since_ms: int | None = None, until_ms: int | None = None, fingerprint: str = "", limit: int = 50,
                 group: str = DEFAULT_GROUP, partition: int | None = None, newest_first: bool = False):
    """One page of a state's messages in one consumer group (and one partition, if given), oldest
    first or ``newest_first``. Search finds one message by id or key; the time range and the error
    group filter the page (the range's near end starts the cursor, so deep ranges stay cheap)."""
    q = get_queue()
    if search:
        msg = q.get(topic, search, group=group)
        if msg is None:
            by_key = q.find_by_key(topic, search)
            msg = q.get(topic, by_key, group=group) if by_key else None
        found = msg and msg.state == state and (partition is None or msg.partition == partition)
        return ([msg] if found else []), None
    if fingerprint and state is MessageState.dead and partition is None:
        # The error group's index, in the time range: never a walk of other errors' dead letters.
        page = q.group_page(topic, fingerprint, limit=limit, after=after, group=group, reverse=newest_first,
                            since_ms=since_ms, until_ms=until_ms)
        return page.messages, page.next_cursor
    # The walk starts at the range's near end and stops past its far end.
    start_ms, end_ms = (until_ms, since_ms) if newest_first else (since_ms, until_ms)
    if start_ms is not None and not after:
        # '~' sorts after every id and '' before: the first page starts at start_ms itself.
        after = position_cursor(start_ms + 1, "") if newest_first else position_cursor(start_ms - 1, "~")
    messages, cursor = [], after
    # Filters can thin a page out; walk on (bounded) until the page is full or the range ends.
    for _ in range(10):
        page = q.page(topic, state, limit=limit, after=cursor, group=group, partition=partition,
                      reverse=newest_first)
        for m in page.messages:
            score = score_ms(m, state)
            if end_ms is not None and score is not None and (score < end_ms if newest_first else score > end_ms):
                return messages, None
            if fingerprint and (not m.last_error or m.last_error.fingerprint != fingerprint):
                continue
            messages.append(m)
            if len(messages) == limit:
                return messages, position_cursor(score, m.id)
        cursor = page.next_cursor
        if not cursor:
            return messages, None
    return messages, cursor


def score_ms(message, state: MessageState) -> int | None:
    """The message's position in its state, in epoch ms: due time, lease deadline or time of death."""
    at = {MessageState.pending: message.due_at, MessageState.ready: message.due_at,
          MessageState.retrying: message.due_at, MessageState.unacked: message.lease_deadline,
          MessageState.dead: message.dead_at}[state]
    return round(at.timestamp() * 1000) if at else None


def redaction_rules(topic: str) -> list[str]:
    from ..models import Topic

    rules = Topic.objects.filter(name=topic).values_list("redaction_rules", flat=True).first()
    return list(rules or [])


def next_attempt_preview(policy, message) -> str:
    """What happens if this message fails again, by its group's retry policy."""
    from queue_core.retry import format_seconds

    from ..templatetags.delayq import attempts_words

    limit = message.max_attempts or policy.max_attempts
    if message.attempts >= limit:
        return f"dead on the next failure ({attempts_words(message.attempts, limit)})"
    delay = policy.delay_ms(max(message.attempts, 1)) / 1000
    jitter = f" ± {policy.jitter:.0%}" if policy.jitter else ""
    return f"retry {format_seconds(delay)}{jitter} after the next failure ({attempts_words(message.attempts, limit)})"


def topic_exists(name: str) -> bool:
    return name in get_queue().topics()


def topic_config(name: str):
    return get_queue().topic_config(name)


def groups(name: str, *, fresh: bool = False) -> list[str]:
    """The topic's consumer groups in the engine, in the order they were added (cached 2 s unless
    ``fresh``)."""
    return list(get_queue().layout(name, fresh=fresh).groups)


def group_config(name: str, group: str = DEFAULT_GROUP):
    return get_queue().group_config(name, group)


def get_message(topic: str, msg_id: str, group: str = DEFAULT_GROUP):
    """The message as ``group`` sees it, or None when the group no longer holds it (acked,
    cancelled, deleted, evicted, or published before the group existed)."""
    return get_queue().get(topic, msg_id, group=group)


def journal(topic: str, msg_id: str, group: str = DEFAULT_GROUP):
    """What the message's handlers reported in ``group`` (progress, log lines): one round trip."""
    return get_queue().journal(topic, msg_id, group=group)


def error_groups(topic: str, limit: int = 50, group: str = DEFAULT_GROUP):
    return get_queue().error_groups(topic, limit=limit, group=group)


def error_texts(topic: str, fingerprints: list[str], group: str = "*") -> dict[str, str]:
    """'Type: message' of the error groups still in the dead-letter queue of ``group`` (``*``: any
    group; all partitions), with card-number-shaped values masked: the analytics page shows them
    to every viewer."""
    from ..redaction import Redactor
    from .contracts import InvalidArgument, Unavailable

    wanted = set(fingerprints)
    if not wanted:
        return {}
    scrub = Redactor(redaction_rules(topic)).text
    q = get_queue()
    try:
        consumer_groups = q.groups(topic) if group == "*" else [group]
        found = [g for name in consumer_groups for g in q.error_groups(topic, limit=1000, group=name)]
    except (Unavailable, InvalidArgument):
        return {}   # the analytics page works from its tables while Redis is down
    return {g.fingerprint: scrub(f"{g.error_type}: {g.sample_message}".strip(": "))
            for g in found if g.fingerprint in wanted}


# -- dispatch control ------------------------------------------------------------------------------

# Why a limit holds ready messages back (the engine's reason names: dispatch_state, the
# "throttled:<reason>" counters and the delayq_throttled_total metric's label).
HELD_REASONS = {"rate": "the group's rate limit", "max_in_flight": "the group's in-flight limit",
                "key_rate": "a fairness key's rate limit", "key_in_flight": "a fairness key's in-flight limit"}


def dispatch_state(topic: str, group: str = DEFAULT_GROUP):
    """The group's limits and what they hold back now, with the fairness keys of largest backlog
    (the engine's dispatch_state: two round trips per partition, at most 64 keys looked at in each)."""
    return get_queue().dispatch_state(topic, group)


def held_reason(topic: str, msg_id: str, group: str = DEFAULT_GROUP) -> str | None:
    """Why a ready message is not being claimed ("waiting: key acme at 5 per 1 s"), or None."""
    return get_queue().held_reason(topic, msg_id, group=group)
