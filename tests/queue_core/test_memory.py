"""memory (queue_core/engine/memory.py): a topic's Redis memory from MEMORY USAGE samples of its
keys, its share of maxmemory and the time until Redis is full at the current growth."""

import pytest

from queue_core import TopicMemory

PAYLOAD = "p" * 200


@pytest.fixture
def maxmemory(dq):
    """A maxmemory limit for the test (restored after): time to full needs one."""
    before = dq.redis.config_get("maxmemory")["maxmemory"]
    used = int(dq.redis.info("memory")["used_memory"])
    dq.redis.config_set("maxmemory", used + 64 * 1024 * 1024)
    yield int(dq.redis.config_get("maxmemory")["maxmemory"])
    dq.redis.config_set("maxmemory", before)


def test_memory_measures_bytes_per_message_from_samples(dq):
    """Bytes per message come from MEMORY USAGE of the topic's keys and match the payload's size
    plus a bounded overhead; an empty topic has no bytes per message."""
    assert dq.memory("t").bytes_per_message is None
    dq.publish_many("t", [PAYLOAD] * 2000, delay=3600)
    m = dq.memory("t")
    assert isinstance(m, TopicMemory) and m.messages == 2000
    assert m.keys_sampled >= 3   # the message store, the pending set, the stats hash at least
    # What a delayed message costs here (docs/design.md measures ~394 B for a 132-byte payload).
    assert 200 < m.bytes_per_message < 200 + 800
    assert m.estimated_bytes == m.measured_bytes >= m.store_bytes > 2000 * 200
    # MEMORY USAGE of a sample against the whole: the store's estimate grows with the messages.
    dq.publish_many("t", [PAYLOAD] * 2000, delay=3600)
    m2 = dq.memory("t")
    assert m2.messages == 4000 and 1.7 < m2.store_bytes / m.store_bytes < 2.3


def test_memory_reads_maxmemory_and_time_to_full_from_the_growth(dq, maxmemory):
    """The share of maxmemory and the time to full follow from the measured bytes and the net
    publish rate (published minus acked over the last whole minutes)."""
    dq.publish_many("t", [PAYLOAD] * 600, delay=3600)
    m = dq.memory("t")
    assert m.maxmemory == maxmemory and m.used_memory > 0 and m.maxmemory_policy
    assert 0 < m.share < 1 and m.share == pytest.approx(m.measured_bytes / maxmemory)
    # The counters of the current minute are not in the rate: write whole minutes' worth directly
    # into the group's per-minute hash, as publish.lua does (one field per minute and event).
    sec, _ = dq.redis.time()
    minute = int(sec) // 60
    for p in range(dq.layout("t").partitions):
        k = dq.keys("t", p).g.minutes
        dq.redis.delete(k)
        if p == 0:
            dq.redis.hset(k, mapping={f"{minute - 1}:published": 600, f"{minute - 2}:published": 300,
                                      f"{minute - 1}:acked": 300})
    dq.redis.hset(dq.keys("t", 0).g.stats, "published", 10_000)   # a topic with history before the window
    m = dq.memory("t")
    # Counted since minute - 2, so averaged over the shortest window, MIN_RATE_MINUTES (15).
    assert m.rate_minutes == 15
    assert m.publish_rate == pytest.approx(900 / 900) and m.ack_rate == pytest.approx(300 / 900)
    assert m.growth_rate == pytest.approx(600 / 900)
    expected = (m.maxmemory - m.used_memory) / (600 / 900 * m.bytes_per_message)
    assert m.time_to_full == pytest.approx(expected)
    assert m.time_to_budget is None   # no budget


def test_memory_time_to_budget_and_no_growth(dq, maxmemory):
    """With a budget, the time until it refuses publishes; with no growth, no time to full."""
    dq.configure_topic("t", max_messages=1000)
    dq.publish_many("t", [PAYLOAD] * 100, delay=3600)
    sec, _ = dq.redis.time()
    k = dq.keys("t", 0).g.minutes
    for p in range(dq.layout("t").partitions):
        dq.redis.delete(dq.keys("t", p).g.minutes)   # the rates are this test's to set
    dq.redis.hset(k, mapping={f"{int(sec) // 60 - 1}:published": 900})   # 1 message/s over 15 minutes
    m = dq.memory("t")
    assert m.max_messages == 1000 and m.time_to_budget == pytest.approx((1000 - 100) / m.growth_rate)
    dq.redis.hset(k, f"{int(sec) // 60 - 1}:acked", 900)   # as many acked: not growing
    m = dq.memory("t")
    assert m.growth_rate == 0 and m.time_to_full is None and m.time_to_budget is None


def test_memory_of_an_unlimited_server_has_no_share(dq):
    """Redis without maxmemory: no share, no time to full (the numbers still come)."""
    before = dq.redis.config_get("maxmemory")["maxmemory"]
    dq.redis.config_set("maxmemory", 0)
    try:
        dq.publish("t", PAYLOAD)
        m = dq.memory("t")
        assert m.maxmemory == 0 and m.share is None and m.time_to_full is None and m.messages == 1
    finally:
        dq.redis.config_set("maxmemory", before)


def test_finding_bytes_per_message_leaves_out_the_fixed_keys(dq):
    """Review #38p4 finding 4: the events stream and other fixed keys were divided by the messages
    (50 pending + a full events stream read 18,565 B a message, real ~204). They are fixed_bytes
    now, and the bytes per message do not move when the stream fills."""
    dq.publish_many("t", [PAYLOAD] * 50, delay=3600)
    before = dq.memory("t")
    groups = dq.layout("t").groups
    for _ in range(300):   # one events entry per call: the stream grows, the messages do not
        dq.publish("t", PAYLOAD)
        for group in groups:
            dq.purge("t", "ready", group=group)
    after = dq.memory("t")
    assert after.messages == before.messages == 50
    assert 200 < before.bytes_per_message < 200 + 800
    assert after.bytes_per_message == pytest.approx(before.bytes_per_message, rel=0.2)
    assert after.fixed_bytes > before.fixed_bytes + 20_000
    assert after.measured_bytes == after.message_bytes + after.fixed_bytes + after.held_bytes


@pytest.mark.single_group
def test_finding_held_messages_are_counted_in_memory(dq, maxmemory):
    """Review #38p4 finding 5: what a purge holds for undo is reported (held_messages,
    held_bytes) and in the estimate and the share; undone, it is a stored message again."""
    dq.publish_many("t", [PAYLOAD] * 40, delay=3600, partition=0)
    assert dq.purge("t", "pending", hold="op-1") == 40
    m = dq.memory("t")
    size = dq.held_size("t")
    assert (m.messages, m.held_messages, m.held_bytes) == (0, 40, size["bytes"]) and size["messages"] == 40
    assert m.held_bytes > 40 * 200 and m.measured_bytes >= m.held_bytes
    assert m.share == pytest.approx(m.measured_bytes / maxmemory)
    assert m.partition_messages[0] == 40
    dq.undo("t", "op-1")
    m = dq.memory("t")
    assert (m.messages, m.held_messages, m.held_bytes) == (40, 0, 0)


def test_finding_time_to_budget_is_the_first_partition_to_fill(dq, maxmemory):
    """Review #38p4 finding 6: a topic filled in one partition reaches its budget there first."""
    dq.configure_topic("t", max_messages=3000)
    parts = dq.layout("t", fresh=True).partitions
    share = -(-3000 // parts)
    dq.publish_many("t", [PAYLOAD] * 900, delay=3600, partition=0)
    sec, _ = dq.redis.time()
    for p in range(parts):
        dq.redis.delete(dq.keys("t", p).g.minutes)
    dq.redis.hset(dq.keys("t", 0).g.minutes, f"{int(sec) // 60 - 1}:published", 900)   # 1 message/s over 15 min
    dq.redis.hset(dq.keys("t", 0).g.stats, "published", 10 ** 6)   # history before the window
    m = dq.memory("t")
    assert m.partition_messages[0] == 900 and sum(m.partition_messages) == 900
    assert m.time_to_budget == pytest.approx((share - 900) / (1 / parts))


def test_finding_a_burst_is_spread_over_the_window_not_the_pace(dq, maxmemory):
    """Console finding 6: a one-off burst set the time to full (5 minutes' average: 6,000 in one
    minute read as 20/s). The rate is averaged over the last 60 whole minutes, or since the first
    counted minute but over 15 at least, so the burst counts for what it is and decays as quiet
    minutes pass; a steady hour is read exactly."""
    dq.publish_many("t", [PAYLOAD] * 100, delay=3600)
    sec, _ = dq.redis.time()
    minute = int(sec) // 60
    k = dq.keys("t", 0).g.minutes

    def counters(mapping):
        for p in range(dq.layout("t").partitions):
            dq.redis.delete(dq.keys("t", p).g.minutes)
        if mapping:
            dq.redis.hset(k, mapping=mapping)
        dq.redis.hset(dq.keys("t", 0).g.stats, "published", 10 ** 6)   # older than the hour counted
        return dq.memory("t")

    burst = counters({f"{minute - 1}:published": 6000})            # the burst, a minute ago
    assert (burst.rate_minutes, burst.publish_rate) == (15, pytest.approx(6000 / 900))
    quiet = counters({f"{minute - 30}:published": 6000})           # the same burst, 29 quiet minutes after
    assert (quiet.rate_minutes, quiet.publish_rate) == (30, pytest.approx(6000 / 1800))
    assert quiet.time_to_full > burst.time_to_full
    steady = counters({f"{m}:published": 120 for m in range(minute - 60, minute)} |
                      {f"{m}:acked": 60 for m in range(minute - 60, minute)})
    assert (steady.rate_minutes, steady.growth_rate) == (60, pytest.approx(1.0))   # 2/s in, 1/s out
    none = counters({})
    assert (none.rate_minutes, none.growth_rate, none.time_to_full) == (60, 0, None)


def test_finding_a_young_topic_is_read_over_its_own_minutes(dq, maxmemory):
    """Review 38w, 4: a topic 2 whole minutes old, 10/s all along, read 0.67/s over 15 minutes. All
    it ever published is in the counters (its lifetime count says so): the window is its own whole
    minutes, 1 at least; once older than 15 minutes (or with history before), 15 to 60 as before."""
    dq.publish_many("t", [PAYLOAD] * 10, delay=3600)
    sec, _ = dq.redis.time()
    minute = int(sec) // 60
    g = dq.keys("t", 0).g

    def history(mapping, lifetime):
        for p in range(dq.layout("t").partitions):
            dq.redis.delete(dq.keys("t", p).g.minutes)
            dq.redis.hdel(dq.keys("t", p).g.stats, "published")
        dq.redis.hset(g.minutes, mapping=mapping)
        dq.redis.hset(g.stats, "published", lifetime)
        return dq.memory("t")

    young = history({f"{minute - 2}:published": 600, f"{minute - 1}:published": 600, f"{minute}:published": 10},
                    lifetime=1210)
    assert (young.rate_minutes, young.rate_all_history) == (2, True)
    assert young.publish_rate == pytest.approx(10.0)
    one = history({f"{minute - 1}:published": 600}, lifetime=600)
    assert (one.rate_minutes, one.publish_rate, one.rate_all_history) == (1, pytest.approx(10.0), True)
    older = history({f"{minute - 2}:published": 600, f"{minute - 1}:published": 600}, lifetime=5000)
    assert (older.rate_minutes, older.rate_all_history) == (15, False)
    assert older.time_to_full > young.time_to_full          # the alert reads the same computation
    grown = history({f"{m}:published": 600 for m in range(minute - 20, minute)}, lifetime=12_000)
    assert (grown.rate_minutes, grown.rate_all_history) == (20, False)

