"""memory and memory budgets on a 3-master Redis Cluster: redis-py's cluster pipeline refuses TIME
and INFO, so q.memory() asks each node holding a partition with plain commands and reports the
fullest one; each partition enforces its share of the budget on its own node."""

import pytest

from queue_core import AsyncDelayQueue, TopicFull
from tests.conftest import run_async

pytestmark = pytest.mark.slow


@pytest.fixture
def maxmemory(redis_cluster):
    """Each master its own maxmemory (restored after): the fullest is the one with the smallest."""
    before = [s.client().config_get("maxmemory")["maxmemory"] for s in redis_cluster]
    limits = {}
    for i, s in enumerate(redis_cluster):
        used = int(s.client().info("memory")["used_memory"])
        limits[s.port] = used + (i + 1) * 100_000_000
        s.client().config_set("maxmemory", limits[s.port])
    yield limits
    for s, b in zip(redis_cluster, before, strict=True):
        s.client().config_set("maxmemory", b)


def test_finding_memory_works_on_a_cluster_and_reports_the_fullest_node(cq, redis_cluster, maxmemory):
    """Review #38p4 finding 2: q.memory() raised RedisClusterException (TIME and INFO in a cluster
    pipeline), so the Memory page answered 500 and the time_to_full alert never fired."""
    cq.configure_topic("ct", partitions=6, max_messages=60)
    cq.publish_many("ct", ["x" * 50] * 30)
    m = cq.memory("ct")
    owners = {cq.redis.get_node_from_key(cq.keys("ct", p).msgs).port for p in range(6)}
    assert m.messages == 30 and m.nodes == len(owners) == 3
    fullest = max(redis_cluster, key=lambda s: int(s.client().info("memory")["used_memory"]) / maxmemory[s.port])
    assert m.maxmemory == maxmemory[fullest.port]
    on_it = [p for p in range(6) if cq.redis.get_node_from_key(cq.keys("ct", p).msgs).port == fullest.port]
    assert m.node_partitions == len(on_it) and 0 < m.node_bytes < m.measured_bytes
    assert 0 < m.share == pytest.approx(m.node_bytes / m.maxmemory)
    assert sum(m.partition_messages) == 30 and m.store_bytes > 30 * 50
    with pytest.raises(TopicFull) as exc:   # each partition its share (10), checked on its node
        cq.publish_many("ct", ["y"] * 40)
    assert exc.value.published == () and sum(cq.memory("ct").partition_messages) == 30


def test_finding_memory_works_on_a_cluster_with_the_asyncio_client(cluster_url, maxmemory):
    """The same plain per-node commands drive redis.asyncio's cluster client."""
    async def measure():
        q = AsyncDelayQueue.from_url(cluster_url, actor="cluster-test")
        try:
            await q.publish_many("ca", ["z" * 20] * 12)
            return await q.memory("ca")
        finally:
            await q.aclose()
    m = run_async(measure())
    assert m.messages == 12 and m.maxmemory in maxmemory.values() and m.share is not None


def test_finding_budget_use_and_lease_counts_work_on_a_cluster(cq):
    """The console's budget badge and the Workers page's lease table read across the masters."""
    cq.configure_topic("ct", partitions=6, max_messages=60, visibility_timeout=60)
    cq.publish_many("ct", ["x" * 50] * 30)
    use = cq.budget_use(["ct", "nobudget"])
    assert list(use) == ["ct"] and sum(use["ct"].partition_messages) == 30 and 0 < use["ct"].fullness < 1
    claimed = cq.claim("ct", 5)
    assert cq.lease_counts([("ct", "default")]) == {("ct", "default"): (len(claimed), 0)}
