"""The handler of the failover test's worker process: every delivery is written to a ledger on
another Redis (one that does not fail over), so the test sees each handling, duplicates included."""

import os

import redis

_ledger = None


def record(message) -> None:
    global _ledger
    if _ledger is None:
        _ledger = redis.Redis.from_url(os.environ["TEST_LEDGER_URL"])
    _ledger.rpush(os.environ["TEST_LEDGER_KEY"], message.id)
