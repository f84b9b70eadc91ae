"""counts (lua/counts.lua): one group's messages per state, one atomic snapshot per partition, summed."""

from queue_core import MessageState, RetryPolicy

from .helpers import assert_counts


def test_counts_every_state_of_one_group(dq):
    """Each state counts what it holds: pending, ready, unacked, retrying and dead at once."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(60, max_attempts=2))
    dq.publish("t", "later", delay=60)
    dq.publish_many("t", ["a", "b", "c", "d"])
    first, second, third = dq.claim("t", 3)
    dq.nack(first, "retry me")
    dq.reject(second, "dead now")
    assert_counts(dq, "t", pending=1, ready=1, unacked=1, retrying=1, dead=1)
    assert dq.counts("t")[MessageState.unacked] == 1 and third.id


def test_counts_of_an_unknown_topic_or_group_are_zero(dq):
    """Nothing is created by counting: an unknown topic or group reads as empty."""
    assert set(dq.counts("nothing-here").values()) == {0}
    dq.publish("t", "x")
    assert set(dq.counts("t", group="other").values()) == {0}
    assert dq.topics() == ["t"]
