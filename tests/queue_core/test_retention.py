import pytest

from queue_core import RetryPolicy

from .helpers import assert_counts, events, poll


@pytest.mark.single_partition   # "oldest" is per partition: each keeps its share
def test_dead_max_count_evicts_oldest_as_events_with_the_message(dq):
    """Eviction is never silent: an event carries the whole message, and a counter records it."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1), dead_max_count=3, events=False)
    ids = dq.publish_many("t", [f"p{i}" for i in range(5)])
    for d in dq.claim("t", 5):
        dq.nack(d, "e")
    assert_counts(dq, "t", dead=3)
    evicted = [e for e in events(dq, "t") if e["event"] == "evicted"]
    assert [e["msg"] for e in evicted] == ids[:2]
    assert [e["payload"] for e in evicted] == ["p0", "p1"] and evicted[0]["reason"] == "max_count"
    assert dq.stats("t")["evicted"] == 2
    assert dq.get("t", ids[0]) is None
    assert sum(g.count for g in dq.error_groups("t")) == 3


def test_dead_max_age_evicts_during_upkeep(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1), dead_max_age=0.05)
    dq.publish("t", "old")
    dq.nack(dq.claim("t")[0], "e")

    def evicted():
        dq.claim("t", 0)
        return dq.counts("t")["dead"] == 0
    poll(evicted)
    assert [e["event"] for e in events(dq, "t")][-1] == "evicted"


@pytest.mark.own_layout
def test_dead_max_count_is_the_groups_total_over_partitions(dq):
    """Each partition keeps its share (rounded up) of the group's dead_max_count."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1), dead_max_count=4, partitions=2)
    dq.publish_many("t", [f"p{i}" for i in range(10)])     # 5 per partition
    for d in dq.claim("t", 10):
        dq.nack(d, "e")
    assert_counts(dq, "t", dead=4)
    assert dq.stats("t")["evicted"] == 6
