import pytest

from queue_core import MessageState, RetryPolicy, StateConflict

from .helpers import assert_counts, data_keys_empty, events


@pytest.mark.parametrize("delay", [0, 60])
def test_cancel_removes_ready_or_pending(dq, delay):
    mid = dq.publish("t", "x", delay=delay, key="k")
    dq.cancel("t", mid)
    assert_counts(dq, "t")
    assert data_keys_empty(dq, "t")
    assert events(dq, "t")[-1]["event"] == "cancelled"


def test_cancel_refuses_unacked(dq):
    mid = dq.publish("t", "x")
    dq.claim("t")
    with pytest.raises(StateConflict):
        dq.cancel("t", mid)
    assert_counts(dq, "t", unacked=1)


def test_delete_dead_only_if_still_dead(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    a, b = dq.publish_many("t", ["a", "b"])
    for d in dq.claim("t", 2):
        dq.nack(d, "e")
    dq.replay("t", [b])
    assert dq.delete("t", [a, b]) == 1
    assert_counts(dq, "t", ready=1)
    assert dq.error_groups("t") == []
    assert dq.get("t", a) is None and dq.get("t", b).state is MessageState.ready
