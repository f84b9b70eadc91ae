"""The message states. One vocabulary everywhere: Redis keys, URLs, templates, CSS and docs."""

from enum import StrEnum


class MessageState(StrEnum):
    pending = "pending"
    """Published with a delay and not yet due. ZSET scored by due time (ms, Redis clock)."""

    ready = "ready"
    """Due and waiting for a worker. ZSET scored by due time, so the oldest due is claimed first."""

    unacked = "unacked"
    """Claimed by a worker whose lease is running. ZSET scored by lease deadline (ms)."""

    retrying = "retrying"
    """Failed and waiting out its backoff. ZSET scored by the next attempt time (ms)."""

    dead = "dead"
    """Out of attempts, rejected, or corrupt. ZSET scored by time of death (ms)."""


ALL_STATES: tuple[MessageState, ...] = tuple(MessageState)
