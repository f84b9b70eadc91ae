"""states (queue_core/engine/read.py): the state of many messages of one group in one round trip."""

import pytest

from queue_core import InvalidArgument, MessageState, RetryPolicy


def test_states_says_where_each_message_is_and_none_once_gone(dq):
    dq.configure_group("t", "default", retry=RetryPolicy.fixed(60, max_attempts=1))
    later, ready = dq.publish("t", "a", delay=600), dq.publish("t", "b")
    dead = dq.publish("t", "c")
    acked = dq.publish("t", "d")
    claimed = {d.message.id: d for d in dq.claim("t", 10)}
    assert set(claimed) == {ready, dead, acked}
    dq.nack(claimed[dead], "boom")        # one attempt: dead at once
    dq.ack(claimed[acked])
    dq.release([claimed[ready]])
    assert dq.states("t", [later, ready, dead, acked, "NOPE"]) == [
        MessageState.pending, MessageState.ready, MessageState.dead, None, None]
    dq.configure_group("t", "other")
    assert dq.states("t", [later], group="other") == [None]    # published before the group existed
    assert dq.states("t", []) == []


def test_states_refuses_more_than_a_thousand_ids(dq):
    with pytest.raises(InvalidArgument, match="at most 1,000 ids"):
        dq.states("t", ["x"] * 1001)
