"""Queue delayq's Celery tasks, and say plainly when the broker cannot take them.

Bulk replay and purge, analytics runs and resumed operations are Celery tasks. With the broker down,
``delay()`` raises kombu's OperationalError deep in a view (an HTTP 500) after the operation row was
written; here it becomes BrokerUnavailable, which names the broker and the worker command, and the
callers delete or fail the row they made so nothing waits for a task that was never queued.
"""

import logging

from celery import current_app
from kombu.exceptions import OperationalError
from kombu.utils.url import maybe_sanitize_url

log = logging.getLogger("delayq.background")

# One quick retry: an operator is waiting for the page.
RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}


class BrokerUnavailable(RuntimeError):
    pass


def broker_url() -> str:
    return maybe_sanitize_url(current_app.conf.broker_url or "(none configured)")


def enqueue(task, *args) -> None:
    try:
        task.apply_async(args, retry=True, retry_policy=RETRY_POLICY)
    except (OperationalError, OSError, RuntimeError) as exc:
        # RuntimeError: Celery's Redis result backend gives up reconnecting when it subscribes for the result.
        log.warning("could not queue %s: %s", task.name, exc)
        raise BrokerUnavailable(
            f"The Celery broker at {broker_url()} cannot be reached ({exc}), so the task was not queued. Start "
            "the broker and a worker ('celery -A <your project> worker'), then try again.") from exc
