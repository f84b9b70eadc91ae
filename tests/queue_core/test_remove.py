import pytest

from queue_core import DelayTooLong, MessageNotFound, MessageState, RetryPolicy, StateConflict

from .helpers import assert_counts, data_keys_empty, events, server_ms


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
