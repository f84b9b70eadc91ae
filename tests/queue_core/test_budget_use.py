"""budget_use (queue_core/engine/memory.py): how full each topic's memory budget is, from the
numbers publish.lua's budget check reads (messages stored and held, the store's bytes), per
partition against its share, for pages that list many topics."""

import pytest

from queue_core import BudgetUse, DelayQueue, InvalidArgument, TopicFull

PAYLOAD = "p" * 100


def _share(dq, topic: str, limit: int) -> int:
    return -(-limit // dq.layout(topic, fresh=True).partitions)


def test_finding_budget_use_says_how_full_and_full_where_publish_refuses(dq):
    """fullness is the fullest partition's use of its share; full exactly where publish refuses."""
    dq.configure_topic("t", max_messages=40)
    dq.publish("free", "no budget")
    share = _share(dq, "t", 40)
    assert dq.budget_use(["t", "free", "missing"]) == {"t": BudgetUse("t", dq.layout("t").partitions, 40, None,
                                                                        (0,) * dq.layout("t").partitions,
                                                                        (0,) * dq.layout("t").partitions)}
    dq.publish_many("t", [PAYLOAD] * (share - 1), delay=3600, partition=0)
    use = dq.budget_use(["t"])["t"]
    assert use.fullness == pytest.approx((share - 1) / share) and not use.full
    dq.publish("t", PAYLOAD, delay=3600, partition=0)
    use = dq.budget_use(["t"])["t"]
    assert use.fullness == 1.0 and use.full
    with pytest.raises(TopicFull):
        dq.publish("t", PAYLOAD, partition=0)


@pytest.mark.single_group
def test_finding_budget_use_counts_what_is_held_for_undo_and_bytes(dq):
    """Held messages count as publish.lua counts them; a bytes budget reads the store's exact bytes."""
    dq.configure_topic("t", max_messages=1000, max_bytes=10_000_000)
    dq.publish_many("t", [PAYLOAD] * 30, delay=3600, partition=0)
    before = dq.budget_use(["t"])["t"]
    assert before.partition_messages[0] == 30 and before.partition_bytes[0] > 30 * 100
    assert dq.purge("t", "pending", hold="op-1") == 30
    held = dq.budget_use(["t"])["t"]
    assert held.partition_messages[0] == 30 and held.partition_bytes[0] == pytest.approx(
        before.partition_bytes[0], rel=0.5)
    assert held.fullness == pytest.approx(30 / _share(dq, "t", 1000))


def test_finding_budget_use_costs_no_more_round_trips_for_more_topics(dq, engine_url, monkeypatch):
    """One pipeline per step whatever the number of topics: a page of 50 topics costs what 1 does."""
    from redis.connection import Connection

    for i in range(50):
        dq.configure_topic(f"t{i}", max_messages=100)
        dq.publish(f"t{i}", PAYLOAD, delay=60)
    sent = []
    real = Connection.send_packed_command

    def counted(self, command, check_health=True):
        sent.append(1)
        return real(self, command, check_health)
    q = DelayQueue.from_url(engine_url)                   # the blocking client's round trips are counted
    q.layouts([f"t{i}" for i in range(50)])              # cached, as a page has them
    monkeypatch.setattr(Connection, "send_packed_command", counted)
    one = q.budget_use(["t0"])
    trips_one, sent[:] = len(sent), []
    many = q.budget_use([f"t{i}" for i in range(50)])
    q.redis.close()
    assert len(sent) == trips_one <= 5 and len(many) == 50 and one["t0"].partition_messages == many["t0"].partition_messages


@pytest.mark.single_group
def test_finding_budget_use_round_trips_are_as_documented(dq, engine_url, monkeypatch):
    """Review 38w, 5: the docstring said five at most; the worst case (a live holding area, a store
    whose byte count is not kept) is 6, and 7 with the layout not cached (the connection's own
    handshake is not budget_use's: it is done before counting)."""
    from redis.connection import Connection

    dq.configure_topic("t", max_messages=1000, max_bytes=10_000_000)
    dq.publish_many("t", [PAYLOAD] * 30, delay=3600, partition=0)
    dq.purge("t", "pending", hold="op-1")                          # a live holding area
    dq.publish_many("t", [PAYLOAD] * 5, delay=3600, partition=0)
    for p in range(dq.layout("t").partitions):
        dq.redis.hdel(dq.keys("t", p).usage, "bytes")               # a store from before the byte count
    sent = []
    real = Connection.send_packed_command

    def counted(self, command, check_health=True):
        sent.append(1)
        return real(self, command, check_health)
    q = DelayQueue.from_url(engine_url)
    q.redis.ping()                                                  # the connection and its handshake
    monkeypatch.setattr(Connection, "send_packed_command", counted)
    cold = q.budget_use(["t"])["t"]
    trips_cold, sent[:] = len(sent), []
    q.budget_use(["t"])
    q.redis.close()
    assert (trips_cold, len(sent)) == (7, 6)
    assert cold.partition_messages[0] == 35 and cold.partition_bytes[0] > 35 * 100


def test_finding_full_partitions_counts_where_publish_refuses(dq):
    """Review 38w, 6: ``full`` says the fullest partition is full; full_partitions how many are."""
    dq.configure_topic("t", max_messages=1000)
    parts = dq.layout("t", fresh=True).partitions
    dq.configure_topic("t", max_messages=2 * parts)                  # a share of 2 each
    dq.publish_many("t", [PAYLOAD] * 2, delay=3600, partition=0)
    use = dq.budget_use(["t"])["t"]
    assert use.full and use.full_partitions == 1
    if parts > 1:
        dq.publish("t", PAYLOAD, delay=3600, partition=parts - 1)     # not full: it takes publishes
    for p in range(1, parts):
        dq.publish_many("t", [PAYLOAD] * (1 if p == parts - 1 else 2), delay=3600, partition=p)
    assert dq.budget_use(["t"])["t"].full_partitions == parts


def test_finding_budget_use_refuses_a_single_name(dq):
    """Review 38w, 7: budget_use("t0") read the name's letters as topics and returned {} silently."""
    dq.configure_topic("t0", max_messages=10)
    for bad in ("t0", b"t0", ["t0", 7]):
        with pytest.raises(InvalidArgument, match="takes a list of topic names"):
            dq.budget_use(bad)
    assert set(dq.budget_use(("t0",))) == {"t0"} and dq.budget_use([]) == {}

