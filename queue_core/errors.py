"""Errors raised by queue_core. Every one says what went wrong and what to do next.

Lua scripts return a non-negative code on success and a negative ``Code`` for a refusal;
``raise_for_code`` is the one place that maps a code to an exception.
"""

from enum import IntEnum


class QueueError(Exception):
    """Base class of every error delayq raises on purpose."""


class InvalidTopic(QueueError, ValueError):
    """The topic name breaks the naming rule."""


class InvalidArgument(QueueError, ValueError):
    """An argument is out of range or contradicts another one."""


class PayloadTooLarge(QueueError, ValueError):
    """The payload is larger than the topic's max_payload_bytes."""


class PayloadNotSerializable(QueueError, TypeError):
    """The payload is neither bytes, str nor JSON-serialisable."""


class DuplicateMessage(QueueError):
    """A message with this key already exists in the topic (publish(..., strict=True))."""

    def __init__(self, message: str, existing_id: str):
        super().__init__(message)
        self.existing_id = existing_id


class LeaseLost(QueueError):
    """The delivery's lease expired or the message was acked already; the call changed nothing."""


class Cancelled(LeaseLost):
    """The message was cancelled while a handler held it (``cancel(..., running=True)``): its
    lease is gone, so an ack or nack from this delivery would be refused. Raised inside a handler
    by ``message.check_cancelled()``; let it propagate (the worker settles nothing for it)."""


class MessageNotFound(QueueError, KeyError):
    """No message with that id exists in the topic (acked, cancelled, deleted or evicted)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class StateConflict(QueueError):
    """The message is not in the state the caller expected (someone else moved it first)."""


class DelayTooLong(QueueError, ValueError):
    """The requested delay exceeds the topic's max_delay."""


class TopicNotEmpty(QueueError):
    """The change needs an empty topic (changing the partition count of a topic holding messages)."""


class TopicFull(QueueError):
    """Publishing would take the topic over its memory budget (``configure_topic(...,
    max_messages=N, max_bytes=B)``); nothing of the call was written. Each partition enforces its
    share of the budget: ``partition``, ``budget`` ("messages" or "bytes"), ``limit`` (the
    topic's), ``share`` (this partition's), ``used`` (the partition's use before the call) and
    ``adding`` (what the call would have added); None where the refusal did not say (a schedule's
    tick). ``published``: the ids a publish of several script calls had already written when a
    later call was refused (a concurrent publisher filled the share after the pre-check); empty
    when nothing was written. Consume or purge messages, or raise the budget."""

    def __init__(self, message: str, *, topic: str, partition: int | None = None, budget: str | None = None,
                 limit: int | None = None, share: int | None = None, used: int | None = None,
                 adding: int | None = None, published: tuple[str, ...] = ()):
        super().__init__(message)
        self.topic, self.partition, self.budget = topic, partition, budget
        self.limit, self.share, self.used, self.adding = limit, share, used, adding
        self.published = tuple(published)


class NotReplicated(QueueError):
    """A write that creates messages reached the master, but fewer replicas than ``wait_replicas``
    acknowledged it within ``wait_timeout``. The messages exist on the master (``ids``) and are
    handled as usual unless the master fails before its replicas catch up; publishing again with
    the same key is safe (it returns the same id)."""

    def __init__(self, message: str, *, acked: int, wanted: int, ids: tuple[str, ...] = ()):
        super().__init__(message)
        self.acked, self.wanted, self.ids = acked, wanted, tuple(ids)


class WorkerCrashed(QueueError):
    """One of a worker's threads failed unexpectedly; the worker stopped (in-flight handlers got
    their grace period) rather than run on without it. Restart it; the log has the traceback."""


class Code(IntEnum):
    OK = 0
    PAYLOAD_TOO_LARGE = -1
    DUPLICATE = -2
    LEASE_LOST = -3
    NOT_FOUND = -4
    STATE_CONFLICT = -5
    DELAY_TOO_LONG = -6
    STALE_LAYOUT = -7     # publish routed by an outdated layout; the client reloads it (never raised)
    CANCELLED = -8        # the lease was taken by cancel(..., running=True); the holder must stop
    TOPIC_FULL = -9       # publish would exceed the topic's memory budget (includes/budget.lua)


def raise_topic_full(topic: str, partition: int, reply: list, published: list[str] | tuple[str, ...] = ()) -> None:
    """Raise TopicFull for publish.lua's {TOPIC_FULL, budget, used, adding, share, limit};
    ``published``: what earlier script calls of the same publish wrote."""
    budget = reply[1].decode() if isinstance(reply[1], bytes) else str(reply[1])
    used, adding, share, limit = (int(v) for v in reply[2:6])
    unit = "messages" if budget == "messages" else "bytes"
    done = (f"{len(published):,} message(s) of this call were published before the refusal (their ids are in "
            f".published); the rest was not." if published else "Nothing was published.")
    raise TopicFull(
        f"topic {topic!r} is full: its max_{budget} budget is {limit:,} {unit} ({share:,} per partition), and "
        f"partition {partition} holds {used:,} {unit}; this publish would add {adding:,}. {done} {_FULL_NEXT}",
        topic=topic, partition=partition, budget=budget, limit=limit, share=share, used=used, adding=adding,
        published=tuple(published))


_FULL_NEXT = "Let workers drain it, purge it, or raise the budget with configure_topic()."



def raise_for_code(code: int, topic: str, detail: str = "") -> None:
    """Raise the exception for a script's refusal code; return quietly for OK."""
    if code >= 0:
        return
    match Code(code):
        case Code.PAYLOAD_TOO_LARGE:
            raise PayloadTooLarge(
                f"payload of {detail} exceeds topic {topic!r}'s limit; send a smaller payload "
                "(store large blobs elsewhere and publish a reference) or raise max_payload_bytes "
                "with configure_topic()"
            )
        case Code.DUPLICATE:
            raise DuplicateMessage(
                f"topic {topic!r} already has a message with this key (id {detail}); "
                "publish without strict=True to get the existing id back",
                existing_id=detail,
            )
        case Code.LEASE_LOST:
            raise LeaseLost(
                f"lease on message {detail} in topic {topic!r} is no longer held (it expired and the "
                "message was redelivered, or it was acked already); nothing was changed. "
                "Raise visibility_timeout or extend() the lease for long handlers."
            )
        case Code.CANCELLED:
            raise Cancelled(f"message {detail} in topic {topic!r} was cancelled while its handler ran; "
                            "its lease is gone and nothing was changed. Stop working on it.")
        case Code.NOT_FOUND:
            raise MessageNotFound(f"no message {detail} in topic {topic!r}; it may have been acked, "
                                  "cancelled, deleted or evicted")
        case Code.STATE_CONFLICT:
            raise StateConflict(f"message {detail} in topic {topic!r}; nothing was changed. "
                                "Reload to see its current state.")
        case Code.TOPIC_FULL:   # publish's own refusals carry the details (raise_topic_full)
            raise TopicFull(f"topic {topic!r} is full: its memory budget refused {detail}. Nothing was published. "
                            f"{_FULL_NEXT}", topic=topic)
        case Code.DELAY_TOO_LONG:
            raise DelayTooLong(f"delay of {detail} exceeds topic {topic!r}'s max_delay; "
                               "raise max_delay with configure_topic() if this is intended")


class HoldExpired(QueueError):
    """An undo found no holding area: the operation's hold expired (its time ran out) or the
    operation never held anything (it ran without ``hold=``). Nothing was changed."""
