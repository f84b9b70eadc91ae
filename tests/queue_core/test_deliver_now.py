"""deliver_now (lua/deliver_now.lua): pending or retrying -> ready now, compare-and-set."""

import pytest

from queue_core import MessageNotFound, RetryPolicy, StateConflict

from .helpers import assert_counts


def test_deliver_now_moves_pending_to_ready(dq):
    mid = dq.publish("t", "x", delay=3600)
    dq.deliver_now("t", mid)
    assert_counts(dq, "t", ready=1)
    assert dq.claim("t")[0].id == mid


def test_deliver_now_moves_retrying_to_ready(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600))
    mid = dq.publish("t", "x")
    dq.nack(dq.claim("t")[0], "e")
    assert_counts(dq, "t", retrying=1)
    dq.deliver_now("t", mid)
    assert_counts(dq, "t", ready=1)
    assert dq.claim("t")[0].attempt == 2


def test_deliver_now_refuses_other_states(dq):
    mid = dq.publish("t", "x")
    with pytest.raises(StateConflict, match="not pending or retrying"):
        dq.deliver_now("t", mid)
    with pytest.raises(MessageNotFound):
        dq.deliver_now("t", "NOPE")
    assert_counts(dq, "t", ready=1)
