"""discard_batch (engine/batch.py): a batch's record goes, sealed or not, and its members stay as
messages of no batch."""

import pytest

from queue_core import MessageNotFound, MessageState

from .test_batch import callbacks, drain


def test_finding_discard_drops_a_batch_and_its_members_stay(dq):
    with pytest.raises(RuntimeError), dq.batch("t", on_complete=("reports", "x"), on_dead=("alerts", "y"),
                                               partition=0) as b:
        ids = b.publish_many(["a", "b"])
        raise RuntimeError("the block failed: the batch stays open")
    b.discard()
    with pytest.raises(MessageNotFound):
        dq.batch_status("t", b.id)
    with pytest.raises(MessageNotFound, match="has no batch"):
        b.publish("c")
    with pytest.raises(MessageNotFound):
        dq.discard_batch("t", b.id)
    assert [dq.get("t", i).state for i in ids] == [MessageState.ready] * 2
    drain(dq)
    for g in dq.groups("t"):
        assert not [f for f in dq.redis.hkeys(dq.keys("t", 0, g).g.batches) if f.startswith(b.id.encode())]
    assert not [f for f in dq.redis.hkeys(dq.keys("t", 0).p.batches) if f.startswith(b.id.encode())]
    assert dq.redis.zscore(dq.keys("t", 0).p.batch_index, b.id) is None
    assert callbacks(dq) == [] and callbacks(dq, "alerts") == []


def test_finding_discard_leaves_no_field_of_the_batch(dq):
    """A member that ended wrote the group's "<batch>|t" (when a member last ended): discard drops it
    with the counters, so no orphan field of the batch stays in any hash."""
    with dq.batch("t", on_complete=("reports", "x"), partition=0) as b:
        b.publish_many(["a", "b", "c"])
    d, = dq.claim("t", 1)
    dq.ack(d)
    gk = dq.keys("t", 0, "default").g.batches
    assert dq.redis.hget(gk, f"{b.id}|t") is not None   # the field the finding was about exists
    dq.discard_batch("t", b.id)
    for g in dq.groups("t"):
        assert [f for f in dq.redis.hkeys(dq.keys("t", 0, g).g.batches) if f.startswith(b.id.encode())] == []
    assert [f for f in dq.redis.hkeys(dq.keys("t", 0).p.batches) if f.startswith(b.id.encode())] == []
