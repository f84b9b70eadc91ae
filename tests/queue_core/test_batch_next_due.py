"""batch_next_due (engine/batch.py): when a batch's first member waiting to be claimed in a group
is due, read from the front of ready, pending and retrying (DUE_SCAN ids each), never by a scan of
the batch or the group."""

import pytest

from queue_core import InvalidArgument, RetryPolicy


def test_finding_next_due_of_delayed_ready_and_retrying_members(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(600, max_attempts=3))
    with dq.batch("t", partition=0) as later:
        later.publish_many(["a", "b"], delay=3600)
    now = dq.server_ms()
    due = dq.batch_next_due("t", later.id)
    assert now + 3_590_000 < due <= now + 3_600_000 + 1000          # delayed: due in an hour
    with dq.batch("t", partition=0) as ready:
        ready.publish_many(["c"], priority=5)
    assert abs(dq.batch_next_due("t", ready.id) - dq.server_ms()) < 5_000   # ready: the due time, not the priority's score
    d, = dq.claim("t", 1)
    assert dq.batch_next_due("t", ready.id) is None          # in flight: no member waits
    dq.nack(d, ValueError("try later"))
    backoff = dq.batch_next_due("t", ready.id)
    assert dq.server_ms() + 590_000 < backoff <= dq.server_ms() + 600_000    # retrying: its next attempt
    assert dq.batch_next_due("t", later.id) == due                           # the other batch is unchanged


def test_finding_next_due_reads_a_bounded_front(dq):
    """Members behind more than `limit` others: the limit-th due time stands for them (a bound)."""
    dq.publish_many("t", [str(i) for i in range(5)], delay=60, partition=0)
    with dq.batch("t", partition=0) as b:
        b.publish_many(["late"], delay=7200)
    front = dq.batch_next_due("t", b.id, limit=3)
    exact = dq.batch_next_due("t", b.id, limit=10)
    assert front < exact and exact > dq.server_ms() + 7_100_000
    with pytest.raises(InvalidArgument):
        dq.batch_next_due("t", b.id, group="no such|group")
