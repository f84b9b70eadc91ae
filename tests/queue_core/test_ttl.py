"""TTL: a message not acked when its time to live runs out is not delivered again; it becomes a
dead letter with the error Expired (replayable), or is dropped when its group says so."""

import pytest

from queue_core import InvalidArgument, MessageState, RetryPolicy

from .helpers import assert_counts, data_keys_empty, events, poll


def expire(dq, topic="t", group="default"):
    """Run upkeep until nothing waits (the TTL is checked by each claim's upkeep)."""
    def done():
        dq.claim(topic, 0, group=group)
        c = dq.counts(topic, group=group)
        return c[MessageState.pending] + c[MessageState.ready] + c[MessageState.retrying] == 0
    poll(done)


def test_expired_message_becomes_a_replayable_dead_letter(dq):
    mid = dq.publish("t", "x", ttl=0.05)
    later = dq.publish("t", "y", delay=0.01, ttl=0.05)
    expire(dq)
    assert_counts(dq, "t", dead=2)
    m = dq.get("t", mid)
    assert m.last_error.type == "Expired" and m.ttl == 0.05 and m.attempts == 0
    assert dq.get("t", later).state is MessageState.dead
    assert dq.stats("t")["ttl_expired"] == 2
    assert [g.error_type for g in dq.error_groups("t")] == ["Expired"]
    assert dq.replay("t", [mid]) == 1                            # an operator's replay ignores the TTL
    assert dq.claim("t")[0].id == mid


def test_drop_on_expire_removes_it_with_an_event(dq):
    dq.configure_group("t", "default", on_expire="drop")
    mid = dq.publish("t", "x", ttl=0.05)
    expire(dq)
    assert_counts(dq, "t") and dq.get("t", mid) is None
    assert data_keys_empty(dq, "t")
    assert [(e["event"], e["next"]) for e in events(dq, "t") if e["event"] == "ttl_expired"] == [("ttl_expired", "dropped")]


def test_group_default_ttl_applies_only_to_messages_without_their_own(dq):
    dq.configure_group("t", "default", ttl=0.05)
    short = dq.publish("t", "x")
    long = dq.publish("t", "y", ttl=600)
    expire_short = poll(lambda: dq.claim("t", 0) or dq.get("t", short).state is MessageState.dead)
    assert expire_short and dq.get("t", long).state is MessageState.ready


def test_a_message_in_progress_finishes_its_attempt(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=5))
    first = dq.publish("t", "ack me", ttl=0.2)
    second = dq.publish("t", "nack me", ttl=0.2)
    d1, d2 = dq.claim("t", 2)
    poll(lambda: dq.server_ms() > d1.claimed_ms + 300)
    dq.claim("t", 0)                                   # upkeep sees both out of time, both unacked
    dq.ack(d1)                                         # the attempt that was running still counts
    assert dq.get("t", first) is None
    assert dq.nack(d2, "failed") is MessageState.dead  # but no retry after the TTL
    assert dq.get("t", second).last_error.type == "Expired"
    assert "failed" in dq.get("t", second).last_error.message


def test_ttl_must_outlive_the_delay(dq):
    with pytest.raises(InvalidArgument, match="longer than the delay"):
        dq.publish("t", "x", delay=10, ttl=5)
    with pytest.raises(InvalidArgument, match="positive"):
        dq.publish("t", "x", ttl=0)


def test_ttl_is_per_group(dq):
    dq.configure_group("t", "slow", ttl=0.05)
    mid = dq.publish("t", "x")
    poll(lambda: dq.claim("t", 0, group="slow") or dq.get("t", mid, group="slow").state is MessageState.dead)
    assert dq.get("t", mid).state is MessageState.ready          # the default group has no TTL


@pytest.mark.parametrize("on_expire", ["dead", "drop"])
def test_finding_a_held_follower_that_expires_is_never_delivered(dq, on_expire):
    """In an ordered group, a message held behind its key's active one whose TTL runs out leaves
    the key's line with it: the holder's ack promotes the next one, not the expired message (it
    was promoted to ready, delivered, and left dead and ready at once; found in review)."""
    dq.configure_group("t", "default", ordered=True, on_expire=on_expire)
    first = dq.publish("t", "x", order_key="k")
    expiring = dq.publish("t", "f", order_key="k", ttl=0.05)
    last = dq.publish("t", "g", order_key="k")
    [held] = dq.claim("t", 5)
    assert held.id == first
    poll(lambda: dq.claim("t", 0) == [] and dq.counts("t")[MessageState.pending] == 1)   # upkeep expired it
    dq.ack(held)
    [d] = dq.claim("t", 5)
    assert d.id == last
    dq.ack(d)
    assert dq.claim("t", 5) == []
    expired = dq.get("t", expiring)
    assert (expired.state if expired else None) == (MessageState.dead if on_expire == "dead" else None)
    assert_counts(dq, "t", dead=1 if on_expire == "dead" else 0)
