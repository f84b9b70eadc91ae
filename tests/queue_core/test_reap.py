"""The claim script's upkeep (lua/claim.lua): expired leases reaped into retrying or dead. Kept apart
from test_claim.py because reaping is its own transition, though claim runs it."""

from queue_core import LeaseLost, MessageState, RetryPolicy

from .helpers import assert_counts, events, poll


def test_expired_lease_becomes_retry_with_lease_expired_error(dq):
    """A dead worker's message comes back as a failed attempt, by the policy."""
    dq.configure_topic("t", visibility_timeout=0.1, retry=RetryPolicy.fixed(0, max_attempts=3))
    mid = dq.publish("t", "x")
    first = dq.claim("t")[0]
    second = poll(lambda: dq.claim("t"))[0]
    assert second.id == mid and second.attempt == 2 and second.token != first.token
    assert_counts(dq, "t", unacked=1)
    m = dq.get("t", mid)
    assert m.last_error.type == "LeaseExpired"
    assert [h.event for h in m.history] == ["published", "claimed", "expired", "claimed"]
    assert any(e["event"] == "expired" and e["next"] == "retrying" for e in events(dq, "t"))
    try:
        dq.ack(first)
        raise AssertionError("stale ack accepted")
    except LeaseLost:
        pass
    dq.ack(second)
    assert_counts(dq, "t")


def test_expired_lease_on_last_attempt_goes_dead(dq):
    dq.configure_topic("t", visibility_timeout=0.05, retry=RetryPolicy.fixed(0, max_attempts=1))
    mid = dq.publish("t", "x")
    dq.claim("t")

    def reaped():
        dq.claim("t", 0)  # upkeep only
        return dq.get("t", mid).state is MessageState.dead
    poll(reaped)
    assert_counts(dq, "t", dead=1)
