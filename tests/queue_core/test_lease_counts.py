"""lease_counts (queue_core/engine/read.py): each group's unacked messages and, of them, those whose
lease ran out: they stay unacked until a claim in the group reaps them."""

import pytest

from queue_core import InvalidArgument, MessageState

from .helpers import poll


def test_finding_lease_counts_tell_expired_leases_from_live_ones(dq):
    """Expired leases are counted apart until a claim reaps them; other groups and topics are apart."""
    dq.configure_topic("t", visibility_timeout=0.3)
    dq.publish_many("t", ["a", "b", "c"])
    dq.publish("other", "x")
    dq.claim("t", 2)
    assert dq.lease_counts([("t", "default"), ("other", "default")]) == {("t", "default"): (2, 0),
                                                                        ("other", "default"): (0, 0)}
    poll(lambda: dq.lease_counts([("t", "default")])[("t", "default")] == (2, 2), timeout=5)
    assert dq.counts("t")[MessageState.unacked] == 2              # still unacked: nobody reaped them
    fresh = dq.claim("t", 5)                                       # reaps the expired two (to retrying), takes c
    counts = dq.lease_counts([("t", "default")])[("t", "default")]
    assert counts[1] == 0 and counts[0] == dq.counts("t")[MessageState.unacked] == len(fresh)


def test_finding_lease_counts_refuses_anything_but_pairs(dq):
    """Review 38w, 7: ["t"] raised a bare ValueError deep in unpacking; now InvalidArgument says what it takes."""
    for bad in (["t"], "t", [("t", "default", "x")], [("t", 3)]):
        with pytest.raises(InvalidArgument, match=r"takes \(topic, group\) pairs"):
            dq.lease_counts(bad)
    assert dq.lease_counts([["t", "default"]]) == {("t", "default"): (0, 0)}   # a list pair, as JSON gives
    assert dq.lease_counts([]) == {}
