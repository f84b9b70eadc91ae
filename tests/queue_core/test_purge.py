import pytest

from queue_core import InvalidArgument, RetryPolicy

from .helpers import assert_counts, data_keys_empty


def test_purge_dead_in_batches(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.publish_many("t", ["x"] * 1200)
    for d in dq.claim("t", 1200):
        dq.nack(d, "e")
    dq.publish("t", "keep me")
    assert dq.purge("t", "dead", batch=500) == 1200
    assert_counts(dq, "t", ready=1)
    assert dq.error_groups("t") == []
    assert dq.stats("t")["deleted"] == 1200


def test_purge_pending(dq):
    dq.publish_many("t", ["x"] * 10, delay=60)
    dq.publish("t", "ready")
    assert dq.purge("t", "pending") == 10
    assert_counts(dq, "t", ready=1)


def test_purge_everything_leaves_no_data(dq):
    dq.publish_many("t", ["x"] * 10)
    assert dq.purge("t", "ready") == 10
    assert data_keys_empty(dq, "t")


def test_purge_unacked_refused(dq):
    dq.publish("t", "x")
    dq.claim("t")
    with pytest.raises(InvalidArgument, match="worker holds them"):
        dq.purge("t", "unacked")
    assert_counts(dq, "t", unacked=1)


def test_purge_keeps_what_entered_the_state_after_the_confirmation(dq):
    """The cutoff is the highest score at confirmation; a message published (or replayed) later
    with an earlier due time is within it, and must survive: it was not what the operator saw."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    seen = dq.publish_many("t", ["x"] * 7, delay=3600)
    [dead] = dq.publish_many("t", ["d"])
    [d] = dq.claim("t")
    dq.nack(d, "boom")
    cutoff, confirmed = dq.purge_cutoff("t", "pending"), dq.server_ms()
    while dq.server_ms() <= confirmed:      # the next arrivals are stamped strictly later
        pass
    late = dq.publish("t", "late", delay=60)                # earlier due time than everything seen
    dq.replay("t", [dead], delay=30)                        # dead -> pending after the confirmation
    skips, deleted = {}, 0
    while True:
        n, examined = dq.purge_batch("t", "pending", cutoff=cutoff, batch=3, entered_before=confirmed,
                                     skips=skips)
        deleted += n
        if examined < 3:
            break
    assert deleted == len(seen)
    assert {m.id for m in dq.peek("t", "pending", limit=10)} == {late, dead}
    assert sum(skips.values()) == 2
