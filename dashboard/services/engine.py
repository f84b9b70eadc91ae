"""The one DelayQueue (and connection pool) per Redis URL that the dashboard uses."""

import logging
from functools import lru_cache

from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from queue_core import DelayQueue

from .. import conf

log = logging.getLogger("delayq.dashboard")


@lru_cache(maxsize=4)
def _queue(url: str, prefix: str, tls: tuple, wait: tuple) -> DelayQueue:
    # One short retry only: a dashboard request must fail fast and say so when Redis is down.
    replicas, timeout = wait
    return DelayQueue.from_url(url, prefix=prefix, actor="dashboard", tls=dict(tls) or None, wait_replicas=replicas,
                               wait_timeout=timeout, socket_timeout=5, socket_connect_timeout=2,
                               retry=Retry(ExponentialBackoff(cap=0.2), 1))


def get_queue() -> DelayQueue:
    """One DelayQueue (and connection pool) per Redis URL and connection settings, shared by the process."""
    q = _queue(conf.redis_url(), conf.prefix(), tuple(sorted(conf.redis_tls().items())), conf.redis_wait())
    q.hold_keep = conf.undo_hours() * 3600   # what purge and kill operations keep for undo (services/undo.py)
    return q
