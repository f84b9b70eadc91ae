import pytest

from queue_core import LeaseLost

from .helpers import assert_counts, data_keys_empty, events, poll


def test_ack_removes_message_and_all_its_data(dq):
    dq.publish("t", "x", key="k")
    d = dq.claim("t")[0]
    dq.ack(d)
    assert_counts(dq, "t")
    assert dq.get("t", d.id) is None
    assert data_keys_empty(dq, "t")
    assert [e["event"] for e in events(dq, "t")] == ["published", "claimed", "acked"]
    assert dq.stats("t")["acked"] == 1


def test_double_ack_is_refused_and_changes_nothing(dq):
    dq.publish_many("t", ["a", "b"])
    d, other = dq.claim("t", 2)
    dq.ack(d)
    with pytest.raises(LeaseLost, match="no longer held"):
        dq.ack(d)
    assert_counts(dq, "t", unacked=1)
    dq.ack(other)


def test_ack_with_stale_token_after_redelivery_is_refused(dq):
    """A worker whose lease expired cannot ack the message another worker now holds."""
    dq.configure_topic("t", visibility_timeout=0.1)
    dq.publish("t", "x")
    first = dq.claim("t")[0]
    second = poll(lambda: dq.claim("t"))
    assert second[0].attempt == 2
    with pytest.raises(LeaseLost):
        dq.ack(first)
    assert_counts(dq, "t", unacked=1)
    dq.ack(second[0])
    assert_counts(dq, "t")


def test_ack_many_reports_refused(dq):
    dq.publish_many("t", ["a", "b", "c"])
    ds = dq.claim("t", 3)
    dq.ack(ds[1])
    refused = dq.ack_many(ds)
    assert refused == [ds[1]]
    assert_counts(dq, "t")


@pytest.mark.single_partition   # the claims below must come from one partition to share an ack call
def test_ack_many_of_several_claims_sends_each_token_once_and_checks_it_per_message(dq):
    """ack.lua takes runs (token, claim ms, count, ids): deliveries of different claims, interleaved, in one
    call; a stale delivery of a message (an earlier claim's token) is refused, its current one
    acked."""
    dq.configure_topic("t", visibility_timeout=0.3)
    dq.publish_many("t", ["a", "b", "c"])
    [stale] = dq.claim("t", 1)                     # claim 1: a, left to expire
    later = dq.claim("t", 2)                       # claim 2: b, c, kept alive
    dq.extend_many(later, 30)
    [again] = poll(lambda: dq.claim("t", 1), timeout=5)   # claim 3: a again, once its lease lapsed
    assert again.id == stale.id and len({stale.token, later[0].token, again.token}) == 3
    refused = dq.ack_many([later[0], stale, again, later[1]])
    assert refused == [stale]
    assert_counts(dq, "t")


def test_an_ack_checks_the_lease_itself_whatever_claim_time_it_is_told(dq):
    """ack.lua finds a first attempt's lease by its head "<token>|1|<claim ms>|", built from what
    the caller sends: a wrong claim time only sends the ack the longer way (the lease read
    whole), and a token that is not the lease's is refused either way."""
    import dataclasses

    dq.publish_many("t", ["a", "b", "c"])
    a, b, c = dq.claim("t", 3)
    told_wrong = dataclasses.replace(a, claimed_ms=a.claimed_ms - 1)
    forged = dataclasses.replace(b, token=b.token + "|1|" + str(b.claimed_ms))   # no token holds a '|'
    stranger = dataclasses.replace(c, token="1.abc")
    assert dq.ack_many([told_wrong, forged, stranger]) == [forged, stranger]
    assert_counts(dq, "t", unacked=2)
    assert dq.ack_many([b, c]) == []
    assert_counts(dq, "t")
    assert [e["event"] for e in events(dq, "t")].count("acked") == 3


def test_finding_a_hand_made_delivery_without_a_claim_time_is_acked(dq):
    """A Delivery is a public dataclass: one made or copied without claimed_ms is acked the longer
    way (its lease read whole), as before the claim time travelled with the token."""
    import dataclasses

    dq.publish("t", "a")
    [d] = dq.claim("t")
    assert dq.ack_many([dataclasses.replace(d, claimed_ms=None)]) == []
    assert_counts(dq, "t")


def test_finding_an_ack_of_thousands_is_several_calls(dq):
    """ack.lua reads a call's leases with one HMGET through Lua's unpack (8,000 values at most):
    an ack_many of 8,000 or more from one partition failed whole. It is cut into calls of
    ACK_CALL_MOST now, each run of a claim token in as few as fit."""
    from queue_core.engine.consume import ACK_CALL_MOST

    n = 4 * ACK_CALL_MOST + 500
    for start in range(0, n, 1000):
        dq.publish_many("t", [str(i) for i in range(start, min(n, start + 1000))])
    claimed = dq.claim("t", n)
    assert len(claimed) == n
    assert dq.ack_many(claimed) == []
    assert_counts(dq, "t")
    assert dq.stats("t")["acked"] == n
