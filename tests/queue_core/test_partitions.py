"""Partitions: a topic split over hash tags; routing by key, ordering key, explicitly or evenly;
any consumer reads every partition; an empty topic may change its partition count."""

import random
from collections import Counter

import pytest

from queue_core import InvalidArgument, MessageState, RetryPolicy
from queue_core.keys import SLOTS, partition_keys, partition_of, partition_tag

from .helpers import data_keys_empty

pytestmark = pytest.mark.own_layout  # builds its own partitions and groups


def per_partition(q, topic, state="ready"):
    return [q.redis.zcard(q.keys(topic, p).state(MessageState(state))) for p in range(q.layout(topic).partitions)]


def test_publish_many_spreads_evenly_and_claims_drain_every_partition(dq):
    dq.configure_topic("t", partitions=4)
    ids = dq.publish_many("t", [str(i) for i in range(400)])
    assert per_partition(dq, "t") == [100, 100, 100, 100]
    assert {partition_of(i) for i in ids} == {0, 1, 2, 3}
    assert dq.get("t", ids[-1]).partition == partition_of(ids[-1])
    got = dq.claim("t", 400)
    assert sorted(d.id for d in got) == sorted(ids)
    dq.ack_many(got)
    assert data_keys_empty(dq, "t")


def test_single_publishes_without_a_key_rotate(dq):
    dq.configure_topic("t", partitions=3)
    ids = [dq.publish("t", str(i)) for i in range(9)]
    assert Counter(partition_of(i) for i in ids) == {0: 3, 1: 3, 2: 3}


def test_a_key_routes_stably_and_dedup_stays_topic_wide(dq):
    dq.configure_topic("t", partitions=8)
    first = dq.publish("t", "a", key="order-17")
    assert dq.publish("t", "b", key="order-17") == first
    assert dq.find_by_key("t", "order-17") == first
    assert len({partition_of(dq.publish("t", "x", key=f"k{i}")) for i in range(200)}) == 8


def test_order_key_wins_over_key_for_routing(dq):
    dq.configure_topic("t", partitions=8)
    # Two ordering keys that land in different partitions, one dedup key: dedup is per partition
    # then (documented), so both are published.
    a, b = next((f"acct-{i}", f"acct-{j}") for i in range(50) for j in range(50)
                if _route(f"acct-{i}", 8) != _route(f"acct-{j}", 8))
    one = dq.publish("t", "1", key="k", order_key=a)
    two = dq.publish("t", "2", key="k", order_key=b)
    assert one != two and partition_of(one) == _route(a, 8) and partition_of(two) == _route(b, 8)
    assert dq.publish("t", "3", key="k", order_key=a) == one   # same ordering key: same partition, deduped


def _route(value, partitions):
    from queue_core.layout import route_hash
    return route_hash(value) % partitions


def test_explicit_partition_and_bad_ones(dq):
    dq.configure_topic("t", partitions=2)
    assert partition_of(dq.publish("t", "x", partition=1)) == 1
    with pytest.raises(InvalidArgument, match="partition 2 does not exist"):
        dq.publish("t", "x", partition=2)
    assert dq.get("t", "01ABCDEFGHJKMNPQRSTVWXYZ01.7") is None   # a partition the topic lacks


def test_pages_walk_every_partition_once_in_due_order(dq):
    dq.configure_topic("t", partitions=3)
    ids = dq.publish_many("t", [str(i) for i in range(100)], delay=60)
    ids += dq.publish_many("t", [str(i) for i in range(50)], delay=30)
    seen, cursor = [], None
    while True:
        page = dq.page("t", "pending", limit=7, after=cursor)
        seen += [(m.due_at, m.id) for m in page.messages]
        cursor = page.next_cursor
        if not cursor:
            break
    assert sorted(i for _, i in seen) == sorted(ids) and seen == sorted(seen)
    assert [m.id for m in dq.peek("t", "pending", offset=10, limit=5)] == [i for _, i in seen[10:15]]


def test_reads_and_bulk_operations_sum_over_partitions(dq):
    dq.configure_topic("t", partitions=3, retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.publish_many("t", [str(i) for i in range(30)])
    for d in dq.claim("t", 30):
        dq.nack(d, ValueError("bad input 7"))
    assert dq.counts("t")[MessageState.dead] == 30 and sum(per_partition(dq, "t", "dead")) == 30
    [group] = dq.error_groups("t")
    assert group.count == 30 and dq.dead_count("t") == 30 and dq.dead_count("t", group.fingerprint) == 30
    assert dq.stats("t")["dead"] == 30
    page = dq.group_page("t", group.fingerprint, limit=12)
    assert len(page.messages) == 12 and page.next_cursor
    rest = dq.group_page("t", group.fingerprint, limit=100, after=page.next_cursor)
    assert len({m.id for m in page.messages + rest.messages}) == 30
    assert dq.replay_dead("t", batch=7) == 30
    assert dq.counts("t")[MessageState.ready] == 30
    assert dq.purge("t", "ready", batch=4) == 30
    assert data_keys_empty(dq, "t")


def test_partition_tags_spread_over_the_slot_ring():
    """Six partitions leave no gap over a quarter of the ring, so each third of an evenly split
    3-master cluster holds at least one, whatever the topic name."""
    from redis.crc import key_slot

    for topic in ("orders", "emails:eu", "a", "x" * 100):
        slots = sorted(key_slot(partition_keys(topic, p).config.encode()) for p in range(6))
        gaps = [b - a for a, b in zip(slots, slots[1:], strict=False)] + [slots[0] + SLOTS - slots[-1]]
        assert max(gaps) <= SLOTS // 4 + SLOTS // 128, (topic, slots)
        assert partition_tag(topic, 0) == topic


def test_random_keys_balance_within_ten_percent():
    rng = random.Random(7)
    counts = Counter(_route(f"user-{rng.getrandbits(64)}", 8) for _ in range(100_000))
    assert max(counts.values()) / min(counts.values()) <= 1.1
