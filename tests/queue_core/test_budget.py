"""A topic's memory budget (configure_topic(..., max_messages=N, max_bytes=B)), enforced by
publish.lua through includes/budget.lua: each partition takes its share (the limit divided by the
partitions, rounded up); a publish above it is refused whole with TopicFull and writes nothing."""

import pytest

from queue_core import InvalidArgument, QueueError, RetryPolicy, TopicConfig, TopicFull

from .helpers import assert_counts, entries, events


def _share(dq, topic: str, limit: int) -> int:
    return -(-limit // dq.layout(topic, fresh=True).partitions)


def _stored(dq, topic: str) -> int:
    return sum(entries(dq, dq.keys(topic, p).msgs) for p in range(dq.layout(topic).partitions))


def test_budget_refuses_a_publish_over_the_partitions_share_and_writes_nothing(dq):
    """At its share a partition refuses the next message with TopicFull naming the budget and the use."""
    dq.configure_topic("t", max_messages=6)
    share = _share(dq, "t", 6)
    ids = dq.publish_many("t", ["m"] * share, partition=0)
    published_before = len(events(dq, "t"))
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "one too many", partition=0)
    e = exc.value
    assert isinstance(e, QueueError)
    assert (e.topic, e.partition, e.budget, e.limit, e.share, e.used, e.adding) == ("t", 0, "messages", 6, share, share, 1)
    assert "max_messages budget is 6" in str(e) and "Nothing was published" in str(e)
    assert_counts(dq, "t", ready=share)
    assert _stored(dq, "t") == share and len(events(dq, "t")) == published_before
    assert sorted(m.id for m in dq.peek("t", "ready", limit=100)) == sorted(ids)


def test_budget_refuses_a_batch_that_does_not_fit_whole(dq):
    """A publish_many that would cross the share writes none of its messages (one script call)."""
    dq.configure_topic("t", max_messages=30)
    share = _share(dq, "t", 30)
    dq.publish_many("t", ["a"] * (share - 2), partition=0)
    with pytest.raises(TopicFull) as exc:
        dq.publish_many("t", ["b"] * 3, partition=0)
    assert (exc.value.used, exc.value.adding) == (share - 2, 3)
    assert _stored(dq, "t") == share - 2
    dq.publish_many("t", ["b"] * 2, partition=0)   # what fits is taken
    assert _stored(dq, "t") == share


def test_budget_refuses_a_publish_of_several_script_calls_before_sending_any(dq):
    """More than one script call (over 250 messages) cannot refuse atomically: the call is checked
    first, so nothing of it is written."""
    dq.configure_topic("t", max_messages=900)
    share = _share(dq, "t", 900)
    with pytest.raises(TopicFull) as exc:
        dq.publish_many("t", ["x"] * (share + 1), partition=0)
    assert exc.value.adding == share + 1 and exc.value.used == 0
    assert _stored(dq, "t") == 0
    assert_counts(dq, "t")


def test_budget_frees_room_as_messages_leave(dq):
    """An ack frees the message's place in the budget: the next publish is taken."""
    dq.configure_topic("t", max_messages=3)
    share = _share(dq, "t", 3)
    dq.publish_many("t", ["m"] * share, partition=0)
    with pytest.raises(TopicFull):
        dq.publish("t", "x", partition=0)
    if "shadow" in dq.groups("t"):
        dq.delete_group("t", "shadow")   # the shape's idle group holds every message too
    for d in dq.claim("t", share):
        dq.ack(d)
    assert _stored(dq, "t") == 0
    dq.publish("t", "fits again", partition=0)
    assert_counts(dq, "t", ready=1)


def test_a_held_key_is_answered_not_refused_at_a_full_budget(dq):
    """A duplicate adds nothing, so a full partition still returns the key's id."""
    dq.configure_topic("t", max_messages=3)
    share = _share(dq, "t", 3)
    first = dq.publish("t", "k", key="k", partition=0)
    dq.publish_many("t", ["m"] * (share - 1), partition=0)
    again = dq.publish("t", "k", key="k", partition=0)
    assert again == first and again.outcome == "duplicate"
    with pytest.raises(TopicFull):
        dq.publish("t", "new key", key="k2", partition=0, dedup="throttle", window=60)
    assert _stored(dq, "t") == share
    assert not dq.redis.hexists(dq.keys("t", 0).dedup, "k2")   # the refused key was not taken either
    assert dq.redis.zscore(dq.keys("t", 0).dedup_until, "k2") is None   # nor its window opened


def test_a_debounce_rewrites_in_place_at_a_full_budget(dq):
    """A debounce of an unstarted message replaces it (no new message): not refused when full."""
    dq.configure_topic("t", max_messages=3)
    share = _share(dq, "t", 3)
    mid = dq.publish("t", "v1", key="k", dedup="debounce", delay=60, partition=0)
    dq.publish_many("t", ["m"] * (share - 1), partition=0)
    again = dq.publish("t", "v2", key="k", dedup="debounce", delay=60, partition=0)
    assert again == mid and again.outcome == "debounced"
    assert dq.get("t", mid).text() == "v2" and _stored(dq, "t") == share


def test_a_replay_moves_a_dead_letter_without_counting_it_again(dq):
    """Replay moves a stored message back to ready: it adds nothing, so a full budget lets it through."""
    dq.configure_topic("t", max_messages=2, retry=RetryPolicy.fixed(1, max_attempts=1))
    share = _share(dq, "t", 2)
    dq.publish_many("t", ["m"] * share, partition=0)
    d = dq.claim("t")[0]
    dq.nack(d, "boom")
    assert dq.get("t", d.message.id).state.value == "dead"
    with pytest.raises(TopicFull):
        dq.publish("t", "x", partition=0)
    assert dq.replay("t", [d.message.id]) == 1
    assert dq.get("t", d.message.id).state.value == "ready" and _stored(dq, "t") == share


def test_bytes_budget_refuses_what_would_cross_it(dq):
    """max_bytes is checked against MEMORY USAGE of the partition's message store plus the call's
    records: a payload that would cross it is refused, a small one is taken."""
    dq.configure_topic("t", max_bytes=30_000)
    share = _share(dq, "t", 30_000)
    dq.publish("t", "small", partition=0)
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "x" * share, partition=0)
    e = exc.value
    assert e.budget == "bytes" and e.adding > share and 0 < e.used < share
    assert "max_bytes budget is 30,000 bytes" in str(e)
    assert _stored(dq, "t") == 1


def test_budget_arguments_are_checked_and_other_settings_kept(dq):
    """Budgets are positive whole numbers or None; setting one keeps the other settings working."""
    for bad in (0, -1, True, "10", 1.5):
        with pytest.raises(InvalidArgument, match="max_messages must be a positive whole number"):
            dq.configure_topic("t", max_messages=bad)
    with pytest.raises(InvalidArgument, match="max_bytes"):
        TopicConfig(max_bytes=0)
    dq.configure_topic("t", max_messages=10, max_bytes=1_000_000, max_payload_bytes=100, history_max=5)
    cfg = dq.topic_config("t")
    assert (cfg.max_messages, cfg.max_bytes, cfg.max_payload_bytes, cfg.history_max) == (10, 1_000_000, 100, 5)
    dq.configure_topic("t")   # the caller states the whole config: no budget now
    cfg = dq.topic_config("t")
    assert (cfg.max_messages, cfg.max_bytes) == (None, None)
    dq.publish_many("t", ["m"] * 12, partition=0)   # nothing refuses without a budget
    assert _stored(dq, "t") == 12


def test_budget_refuses_an_even_spread_over_partitions_whole(dq):
    """publish_many without a routing key spreads over the partitions (several script calls when
    there are several): it is checked before any call and refused whole."""
    dq.configure_topic("t", max_messages=6)
    partitions = dq.layout("t").partitions
    with pytest.raises(TopicFull) as exc:
        dq.publish_many("t", ["m"] * 7)
    assert exc.value.share == _share(dq, "t", 6) and exc.value.adding > exc.value.share - exc.value.used
    assert _stored(dq, "t") == 0 and sum(dq.counts("t").values()) == 0
    dq.publish_many("t", ["m"] * (2 * partitions if partitions > 1 else 6))   # fits every share: taken
    assert _stored(dq, "t") == (2 * partitions if partitions > 1 else 6)


def test_a_schedule_tick_to_a_full_topic_is_refused_and_writes_nothing(dq):
    """A tick is published by publish.lua's own code: a full topic refuses it with TopicFull, and
    the schedule neither advances nor records the tick (it fires once there is room)."""
    dq.configure_topic("reports", max_messages=3)
    share = _share(dq, "reports", 3)
    dq.upsert_schedule("hourly", topic="reports", every=3600, catchup_window=7200, payload="go")
    partition = dq.schedule("hourly").partition   # the schedule's home: where its ticks go
    dq.publish_many("reports", ["m"] * share, partition=partition)
    before = dq.schedule("hourly")
    with pytest.raises(TopicFull, match="topic 'reports' is full"):
        dq.run_schedule_now("hourly")
    after = dq.schedule("hourly")
    assert (after.next_ms, after.runs, after.ticks) == (before.next_ms, before.runs, before.ticks)
    assert _stored(dq, "reports") == share
