"""kill (lua/kill.lua): retrying -> dead now, with the last error, without the remaining attempts."""

import pytest

from queue_core import MessageState, RetryPolicy, StateConflict

from .helpers import assert_counts


def test_kill_moves_retrying_to_dead_with_its_last_error(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600, max_attempts=10))
    a, b = dq.publish_many("t", ["a", "b"])
    for d in dq.claim("t", 2):
        dq.nack(d, ValueError("card declined"))
    assert dq.kill_many("t", [a, b, "NOPE"]) == [0, 0, -4]
    assert_counts(dq, "t", dead=2)
    m = dq.get("t", a)
    assert m.last_error.type == "ValueError" and m.attempts == 1 and m.history[-1].event == "killed"
    [group] = dq.error_groups("t")
    assert group.count == 2 and group.error_type == "ValueError"
    assert dq.stats("t")["dead"] == 2
    with pytest.raises(StateConflict, match="not retrying"):
        dq.kill("t", a)                              # already dead
    ready = dq.publish("t", "c")
    with pytest.raises(StateConflict):
        dq.kill("t", ready)
    dq.replay("t", [a])
    assert dq.get("t", a).state is MessageState.ready
