"""release (lua/release.lua): a stopping worker gives back claimed, unhandled messages: unacked -> ready
at once, the attempt not counted; a stale lease is refused."""

from queue_core import MessageState

from .helpers import assert_counts


def test_release_gives_back_without_counting_the_attempt(dq):
    """Released messages are ready again at once and their next claim is still attempt 1."""
    dq.publish_many("t", ["a", "b"])
    deliveries = dq.claim("t", 2)
    assert dq.release(deliveries) == 2
    assert_counts(dq, "t", ready=2)
    again = dq.claim("t", 2)
    assert sorted(d.attempt for d in again) == [1, 1]
    assert {d.id for d in again} == {d.id for d in deliveries}


def test_release_with_a_lost_lease_changes_nothing(dq):
    """A delivery whose lease was taken over (acked, or reclaimed after expiry) is not released."""
    dq.publish("t", "a")
    [delivery] = dq.claim("t")
    dq.ack(delivery)
    assert dq.release([delivery]) == 0
    assert_counts(dq, "t")
    dq.publish("t", "b")
    [held] = dq.claim("t")
    assert dq.release([held, delivery]) == 1
    assert dq.get("t", held.id).state is MessageState.ready
