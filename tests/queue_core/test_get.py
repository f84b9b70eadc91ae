"""get (lua/get.lua): one message as a group sees it."""

from queue_core import MessageState
from queue_core.keys import partition_of

from .helpers import assert_counts


def test_get_missing_is_none(dq):
    assert dq.get("t", "NOPE") is None
    assert_counts(dq, "t")


def test_corrupt_metadata_read_does_not_raise(dq):
    mid = dq.publish("t", "x")
    dq.redis.hset(dq.keys("t", partition_of(mid)).msgs, mid, "[1,2]")
    m = dq.get("t", mid)
    assert m.state is MessageState.ready and m.corrupt and "unreadable" in m.corrupt
    assert dq.peek("t", "ready")[0].corrupt
