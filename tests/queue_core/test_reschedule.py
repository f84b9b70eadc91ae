"""reschedule (lua/reschedule.lua): a pending or retrying message gets a new due time and keeps its state."""

import pytest

from queue_core import DelayTooLong, MessageState, RetryPolicy, StateConflict

from .helpers import assert_counts, events, server_ms


def test_reschedule_moves_a_pending_message_to_a_new_due_time(dq):
    mid = dq.publish("t", "x", delay=3600)
    before = server_ms(dq)
    dq.reschedule("t", mid, delay=120)
    after = server_ms(dq)
    m = dq.get("t", mid)
    due = round(m.due_at.timestamp() * 1000)
    assert m.state is MessageState.pending and before + 120_000 <= due <= after + 120_000
    assert m.history[-1].event == "rescheduled"
    assert events(dq, "t")[-1]["event"] == "rescheduled"
    dq.reschedule("t", mid, delay=0)                 # due now: claimable at once
    assert [d.id for d in dq.claim("t")] == [mid]


def test_reschedule_keeps_a_retrying_message_retrying_and_refuses_other_states(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600), max_delay=7200)
    mid = dq.publish("t", "x")
    dq.nack(dq.claim("t")[0], "e")
    dq.reschedule("t", mid, delay=5)
    assert_counts(dq, "t", retrying=1)
    assert dq.get("t", mid).due_at.timestamp() * 1000 <= server_ms(dq) + 5_000
    with pytest.raises(DelayTooLong):
        dq.reschedule("t", mid, delay=10_000)
    ready = dq.publish("t", "y")
    with pytest.raises(StateConflict, match="not pending or retrying"):
        dq.reschedule("t", ready, delay=60)
    # Compare-and-set on the state the caller saw: a tab of pending messages cannot move a retrying one.
    assert dq.reschedule_many("t", [mid, "NOPE"], delay=60, states=[MessageState.pending]) == [-5, -4]
    assert_counts(dq, "t", ready=1, retrying=1)
