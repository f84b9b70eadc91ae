"""lease_counts (queue_core/engine/read.py): each group's unacked messages and, of them, those whose
lease ran out: they stay unacked until a claim in the group reaps them."""

from queue_core import MessageState

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
