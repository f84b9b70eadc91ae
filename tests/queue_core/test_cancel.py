"""cancel(..., running=True) (lua/cancel.lua): stop a message a worker is running. The lease is
taken at once (any later ack, nack or extend with its token is refused), the holder learns it at
its next lease extension, and the message ends dead with "cancelled by <actor>" (or removed)."""

import pytest

from queue_core import Cancelled, LeaseLost, MessageState, StateConflict

from .helpers import assert_counts, data_keys_empty, events


def test_cancel_running_makes_the_message_dead_and_fences_its_lease(dq):
    """An unacked message becomes a dead letter "cancelled by alice"; the old token acks nothing."""
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    dq.cancel("t", mid, running=True, actor="alice")
    assert_counts(dq, "t", dead=1)
    m = dq.get("t", mid)
    assert m.state is MessageState.dead
    assert m.last_error.type == "Cancelled" and m.last_error.message == "cancelled by alice"
    assert [(h.event, h.actor) for h in m.history[-2:]] == [("claimed", ""), ("cancelled", "alice")]
    assert "cancelled by alice" in m.history[-1].detail
    # The holder's next extension says why its lease is gone (once), and marks the message.
    with pytest.raises(Cancelled, match="cancelled while its handler ran"):
        dq.extend(d, 30)
    assert d.message.cancelled
    with pytest.raises(Cancelled):
        d.message.check_cancelled()
    # Fencing: the token acks and nacks nothing, and the dead letter stays as it was.
    with pytest.raises(LeaseLost):
        dq.ack(d)
    with pytest.raises(LeaseLost):
        dq.nack(d, ValueError("late"))
    assert_counts(dq, "t", dead=1)
    assert dq.get("t", mid).history[-1].event == "cancelled"
    [group] = dq.error_groups("t")
    assert group.error_type == "Cancelled" and group.count == 1
    assert dq.stats("t")["cancelled"] == 1
    # It is an ordinary dead letter: replay gives it a new attempt.
    assert dq.replay("t", [mid]) == 1
    assert_counts(dq, "t", ready=1)


def test_cancel_running_with_remove_leaves_nothing(dq):
    """remove=True: the running message is gone, with a 'cancelled' event from unacked."""
    mid = dq.publish("t", "work", key="k1")
    [d] = dq.claim("t", 1)
    dq.cancel("t", mid, running=True, remove=True, actor="bob")
    assert_counts(dq, "t")
    assert dq.get("t", mid) is None
    [row] = [r for r in events(dq, "t") if r["event"] == "cancelled"]
    assert row["msg"] == mid and row["from"] == "unacked" and row["actor"] == "bob"
    assert dq.extend_many([d], 30) == [None] and d.message.cancelled
    with pytest.raises(LeaseLost):
        dq.ack(d)
    assert data_keys_empty(dq, "t")   # lease, record and dedup key went with it


def test_a_stale_token_is_told_lease_lost_not_cancelled(dq):
    """Only the holder of the cancelled lease hears 'cancelled'; other tokens hear 'lease lost'."""
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    dq.cancel("t", mid, running=True)
    assert dq.extend_many([d], 30) == [None] and d.message.cancelled
    assert dq.extend_many([d], 30) == [None]   # told once; the mark is gone
    dq.replay("t", [mid])
    [d2] = dq.claim("t", 1)
    assert d2.token != d.token
    dq.ack(d2)
    assert not d2.message.cancelled
    assert_counts(dq, "t")


def test_cancel_without_running_still_refuses_an_unacked_message(dq):
    """The plain cancel never touches work in progress."""
    mid = dq.publish("t", "work")
    [d] = dq.claim("t", 1)
    with pytest.raises(StateConflict, match="pending or ready or retrying"):
        dq.cancel("t", mid)
    assert_counts(dq, "t", unacked=1)
    dq.ack(d)


def test_cancel_running_on_a_waiting_message_removes_it(dq):
    """running=True on a message nobody runs is the plain cancel: removed, never dead."""
    ready, later = dq.publish("t", "now"), dq.publish("t", "later", delay=60)
    dq.cancel("t", ready, running=True)
    dq.cancel("t", later, running=True)
    assert_counts(dq, "t")
    assert dq.stats("t")["cancelled"] == 2
    assert dq.cancel_many("t", [ready, "NOPE"]) == [-4, -4]


def test_cancel_many_reports_per_id(dq):
    """One code per id: cancelled, not found, or outside the expected states."""
    a, b = dq.publish_many("t", ["a", "b"])
    claimed = dq.claim("t", 2)
    assert dq.cancel_many("t", [a, b, "NOPE"], states=[MessageState.unacked]) == [0, 0, -4]
    assert_counts(dq, "t", dead=2)
    c = dq.publish("t", "c")
    assert dq.cancel_many("t", [c], states=[MessageState.unacked]) == [-5]
    assert dq.extend_many(claimed, 30) == [None, None]
    assert all(d.message.cancelled for d in claimed)
