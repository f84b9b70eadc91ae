"""The bridge tests' fixture: the test app (tests/celery_bridge/app.py) with a real Celery worker
and a real forwarder process on demand, and the delayq queue behind it."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from queue_core import DelayQueue
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "celery.celery"


@pytest.fixture
def bridge(redis_server, redis_url, monkeypatch):
    """The test app, its environment for child processes, and the delayq queue behind it."""
    broker = redis_server.url.rsplit("/", 1)[0] + "/1"
    redis_server.client(db=1).flushdb()
    monkeypatch.setenv("BRIDGE_BROKER_URL", broker)
    monkeypatch.setenv("BRIDGE_DELAYQ_URL", redis_url)
    sys.modules.pop("tests.celery_bridge.app", None)
    module = importlib.import_module("tests.celery_bridge.app")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []

    def start(kind):
        if kind == "worker":
            cmd = [sys.executable, "-m", "celery", "-A", "tests.celery_bridge.app", "worker", "--pool", "threads",
                   "--concurrency", "8", "-l", "warning", "--without-gossip", "--without-mingle"]
        else:
            cmd = [sys.executable, "-m", "queue_core", "--url", redis_url, "celery-forwarder",
                   "--app", "tests.celery_bridge.app:app", "--concurrency", "4"]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        q = DelayQueue.from_url(redis_url)
        if kind == "worker":
            wait_for(lambda: proc.poll() is None and bool(module.app.control.ping(timeout=0.5)), 60, "celery worker")
        else:
            wait_for(lambda: proc.poll() is None and bool(q.workers(TOPIC)), 60, "forwarder")
        return proc

    yield module, start, DelayQueue.from_url(redis_url), redis_server.client(db=1)
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def runs(q, key="bridge:ran"):
    return [x.decode() for x in q.redis.lrange(key, 0, -1)]
