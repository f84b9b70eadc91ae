"""Publishing: from inside a database transaction (the message goes out only if the transaction
commits, and never before: a consumer can never see a message about a row it cannot read yet), and
at once for the JSON API."""

import logging
from datetime import UTC, datetime, timedelta

from django.db import transaction

from .engine import get_queue

log = logging.getLogger("delayq.publish")

# How far ahead a due time, a delay or a TTL may reach. The engine keeps times as epoch
# milliseconds written by Lua's tostring (14 significant digits): past ~3,100 years they turn
# into "1e+14" and the record can no longer be read back; 1,000 years stays clear of that.
MAX_AHEAD = timedelta(days=365 * 1000)


def due_time_problem(at: datetime | int) -> str | None:
    """What is wrong with a due time (an aware datetime, or epoch ms): None when the engine can
    store it, else the sentence to show (from 1970 to MAX_AHEAD from now)."""
    try:
        ms = at if isinstance(at, int) else at.timestamp() * 1000
    except (OverflowError, ValueError):
        ms = -1
    latest = datetime.now(UTC) + MAX_AHEAD
    if 0 <= ms <= latest.timestamp() * 1000:
        return None
    return f"must be between 1970-01-01 and {latest:%Y-%m-%d} UTC ({MAX_AHEAD.days // 365:,} years from now)"


def publish_on_commit(topic: str, payload, *, using: str | None = None, **publish_kwargs) -> None:
    """Publish ``payload`` to ``topic`` once the current transaction (of database ``using``)
    commits; nothing when it rolls back. Outside a transaction it publishes at once.

    The window that remains: the process dies between the commit and the publish. Give a ``key``
    (e.g. the row's id) so that a retry of the whole operation, or a sweep that republishes what
    it finds unsent, cannot publish twice: delayq keeps one message per key while it exists.
    A Redis failure at that point raises from the commit, like any on_commit callback, with the
    data already committed; the log says which topic and key to republish.
    """
    def send():
        try:
            get_queue().publish(topic, payload, **publish_kwargs)
        except Exception:
            log.exception("publish after commit failed: topic %s, key %s; the transaction is committed, "
                          "republish it", topic, publish_kwargs.get("key"))
            raise

    transaction.on_commit(send, using=using)


def publish(topic: str, payload, **publish_kwargs) -> str:
    """Publish now (the JSON API's publish endpoint): the message's id."""
    return get_queue().publish(topic, payload, **publish_kwargs)
