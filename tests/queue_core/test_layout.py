"""layout (lua/layout.lua): partition counts and group lists change atomically on partition 0 and
publishers with a stale layout route again."""

import pytest

from queue_core import DelayQueue, MessageState, RetryPolicy, TopicNotEmpty
from queue_core.keys import partition_of

pytestmark = pytest.mark.own_layout  # builds its own partitions and groups


def test_partition_count_changes_only_when_empty(dq):
    dq.configure_topic("t", partitions=2)
    dq.publish("t", "x")
    with pytest.raises(TopicNotEmpty, match="holds 1 message"):
        dq.configure_topic("t", partitions=4)
    assert dq.layout("t", fresh=True).partitions == 2
    dq.ack(dq.claim("t")[0])
    dq.configure_topic("t", partitions=4)
    assert dq.topic_config("t").partitions == 4
    assert {partition_of(i) for i in dq.publish_many("t", ["y"] * 8)} == {0, 1, 2, 3}


def test_a_publisher_with_a_stale_partition_count_routes_again(dq, engine_url):
    other = DelayQueue.from_url(engine_url)
    other.publish("t", "warm")                      # caches one partition
    dq.ack(dq.claim("t")[0])
    dq.configure_topic("t", partitions=4)
    ids = other.publish_many("t", ["x"] * 8)
    assert {partition_of(i) for i in ids} == {0, 1, 2, 3}
    assert len(dq.claim("t", 8)) == 8
    other.redis.close()


def test_growing_partitions_carries_every_groups_settings(dq):
    dq.configure_group("t", "billing", ordered=True, ttl=60, retry=RetryPolicy.fixed(3, max_attempts=2))
    dq.configure_topic("t", partitions=4)
    for p in range(4):
        raw = {k.decode(): v.decode() for k, v in dq.redis.hgetall(dq.keys("t", p, "billing").g.config).items()}
        assert raw["ordered"] == "1" and raw["ttl_ms"] == "60000" and raw["max_attempts"] == "2", p


def test_a_publisher_with_a_stale_layout_still_reaches_a_new_group(dq, engine_url):
    other = DelayQueue.from_url(engine_url)
    other.publish("t", "warm the cache")          # caches the layout: one group
    dq.configure_group("t", "audit")
    mid = other.publish("t", "after")             # refused as stale by the script, routed again
    assert dq.get("t", mid, group="audit").state is MessageState.ready
    other.redis.close()
