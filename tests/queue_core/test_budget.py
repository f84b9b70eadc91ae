"""A topic's memory budget (configure_topic(..., max_messages=N, max_bytes=B)), enforced by
publish.lua through includes/budget.lua: each partition takes its share (the limit divided by the
partitions, rounded up); a publish above it is refused whole with TopicFull and writes nothing."""

import hashlib

import pytest

from queue_core import DelayQueue, InvalidArgument, QueueError, RetryPolicy, TopicConfig, TopicFull
from queue_core.keys import HASHTABLE_FIELD, MEMORY_SAMPLES, RECORD_OVERHEAD_BYTES

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


def _exact_bytes(dq, topic: str, p: int) -> int:
    """What includes/usage.lua must count: each record's id, value and the fixed overhead."""
    raw = dq.redis.hgetall(dq.keys(topic, p).msgs)
    return sum(len(k) + len(v) + RECORD_OVERHEAD_BYTES for k, v in raw.items() if k != HASHTABLE_FIELD.encode())


def _counted(dq, topic: str, p: int) -> int | None:
    v = dq.redis.hget(dq.keys(topic, p).usage, "bytes")
    return None if v is None else int(v)


def test_finding_debounce_growth_is_checked_against_max_bytes(dq):
    """Review #38p4 finding 1: a debounce "added nothing", so keys debounced from "x" to 900 KB
    stored 4.5 MB under a 200 KB budget. Now a debounce is checked by its payload's growth."""
    dq.configure_topic("t", max_bytes=200_000, max_payload_bytes=1_000_000)
    mid = dq.publish("t", "x", key="k", dedup="debounce", delay=60, partition=0)
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "B" * 900_000, key="k", dedup="debounce", delay=60, partition=0)
    assert exc.value.budget == "bytes" and exc.value.adding == 900_000 - 1
    assert dq.get("t", mid).text() == "x" and _counted(dq, "t", 0) == _exact_bytes(dq, "t", 0)
    # A debounce that shrinks or keeps the size is taken at a full budget, and the count follows it.
    grown = dq.publish("t", "y" * 50_000, key="k", dedup="debounce", delay=60, partition=0)
    assert grown.outcome == "debounced" and dq.get("t", mid).text() == "y" * 50_000
    assert dq.publish("t", "z", key="k", dedup="debounce", delay=60, partition=0).outcome == "debounced"
    assert _counted(dq, "t", 0) == _exact_bytes(dq, "t", 0) < 1_000


def test_finding_bytes_budget_counts_every_record_not_a_sample(dq):
    """Review #38p4 finding 1: MEMORY USAGE SAMPLES 64 read the first records only, so 10,000 tiny
    records then 200 x 900 KB were all taken under 10 MB. The exact count refuses the huge ones
    as soon as they cross the share."""
    dq.configure_topic("t", max_bytes=3_000_000, max_payload_bytes=300_000)
    share = _share(dq, "t", 3_000_000)
    for _ in range(8):
        dq.publish_many("t", ["t"] * 250, delay=600, partition=0)
    tiny = _exact_bytes(dq, "t", 0)
    taken = 0
    with pytest.raises(TopicFull) as exc:
        for _ in range(20):
            dq.publish("t", "H" * 200_000, delay=600, partition=0)
            taken += 1
    exact = _exact_bytes(dq, "t", 0)
    assert _counted(dq, "t", 0) == exact == exc.value.used <= share
    assert taken == (share - tiny) // exc.value.adding   # every huge record that fits, and no more


def test_finding_byte_count_follows_every_write_and_removal(dq):
    """The exact count is kept by publish, debounce, replay_edited (in place and as a copy), the
    removal point (ack, purge) and undo; it is 0 once the store is empty."""
    dq.configure_topic("t", max_bytes=10_000_000, retry=RetryPolicy.fixed(1, max_attempts=1))
    p = dq.layout("t", fresh=True).partitions
    parts = range(p)

    def check():
        for i in parts:   # a partition never written to has no count (and no records)
            assert _counted(dq, "t", i) == (_exact_bytes(dq, "t", i) if i == 0 else None)

    ids = dq.publish_many("t", ["a" * 10, "b" * 1000, "c"], partition=0)
    dq.publish("t", "k1", key="kk", dedup="debounce", delay=60, partition=0)
    dq.publish("t", "k2" * 500, key="kk", dedup="debounce", delay=60, partition=0)
    check()
    d = dq.claim("t")[0]
    dq.nack(d, "boom")
    seen = hashlib.sha1(dq.get("t", d.message.id).text().encode()).hexdigest()
    dq.replay_edited("t", d.message.id, "edited" * 300, seen)
    check()
    for d in dq.claim("t", count=10):
        dq.ack(d)
    check()
    dq.purge("t", "pending", hold="op")
    check()
    dq.undo("t", "op")
    check()
    for group in dq.layout("t").groups:
        for state in ("pending", "ready", "dead"):
            dq.purge("t", state, group=group)
    assert _counted(dq, "t", 0) == 0 and _exact_bytes(dq, "t", 0) == 0 and ids


def test_finding_a_store_from_before_the_count_falls_back_until_empty(dq):
    """A partition holding records from before the count existed has none (it would be wrong):
    the budget reads MEMORY USAGE then, and the count starts exact with the first publish into an
    empty store."""
    dq.configure_topic("t", max_bytes=100_000)
    dq.publish_many("t", ["old"] * 3, partition=0)
    dq.redis.delete(dq.keys("t", 0).usage)   # as before the upgrade
    dq.publish("t", "new", partition=0)
    assert _counted(dq, "t", 0) is None
    sampled = dq.redis.memory_usage(dq.keys("t", 0).msgs, samples=MEMORY_SAMPLES)
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "x" * (_share(dq, "t", 100_000) - 100), partition=0)
    assert exc.value.used == sampled > 0
    for group in dq.layout("t").groups:
        for d in dq.claim("t", count=10, group=group):
            dq.ack(d)
    assert _counted(dq, "t", 0) is None
    dq.publish("t", "again", partition=0)
    assert _counted(dq, "t", 0) == _exact_bytes(dq, "t", 0)


@pytest.mark.single_group
def test_finding_held_messages_count_in_the_budget(dq):
    """Review #38p4 finding 5: a purge held for undo freed its share, so the topic refilled and
    undo restored past the budget. Held messages and bytes count as used until undone or expired."""
    dq.configure_topic("t", max_messages=100, max_bytes=10_000_000)
    share = _share(dq, "t", 100)
    dq.publish_many("t", ["x" * 100] * share, delay=600, partition=0)
    assert dq.purge("t", "pending", hold="op-1") == share
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "y", partition=0)
    assert (exc.value.budget, exc.value.used) == ("messages", share)
    assert dq.undo("t", "op-1").restored == share   # restored within what was counted
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "y", partition=0)
    assert exc.value.used == share and _stored(dq, "t") == share


@pytest.mark.single_group
def test_finding_held_bytes_count_in_the_bytes_budget(dq):
    """The bytes of a holding area count against max_bytes like the messages do."""
    dq.configure_topic("t", max_bytes=300_000, max_payload_bytes=200_000)
    dq.publish("t", "H" * 150_000, delay=600, partition=0)
    dq.purge("t", "pending", hold="op-2")
    assert _counted(dq, "t", 0) == 0
    with pytest.raises(TopicFull) as exc:
        dq.publish("t", "H" * (_share(dq, "t", 300_000) - 100_000), partition=0)
    assert exc.value.budget == "bytes" and exc.value.used > 150_000


class _RacedQueue(DelayQueue):
    """A blocking queue whose operations let ``race()`` run once, as a concurrent publisher, as
    soon as partition 0 of topic "t" holds ``after`` messages (between two script calls)."""

    race = None
    after = 0

    def _drive(self, steps):
        reply, error = None, None
        try:
            step = next(steps)
            while True:
                try:
                    reply = step(self.redis)
                except Exception as exc:  # noqa: BLE001 - handed to the operation, as run() does
                    step, error = steps.throw(exc), exc
                    continue
                if self.race and entries(self, self.keys("t", 0).msgs) >= self.after:
                    self.race, race = None, self.race
                    race()
                step = steps.send(reply)
        except StopIteration as done:
            del error
            return done.value


def test_finding_a_refused_later_call_says_what_was_published(engine_url):
    """Review #38p4 finding 3: a publish of several script calls refused by a later call (a
    concurrent publisher filled the share after the pre-check) said "Nothing was published" while
    its earlier calls were written. TopicFull now carries their ids and says so."""
    q = _RacedQueue.from_url(engine_url, actor="test")
    other = DelayQueue.from_url(engine_url, actor="other")
    try:
        q.configure_topic("t", max_messages=1300)
        q.race, q.after = (lambda: other.publish_many("t", ["f"] * 200, partition=0)), 1000
        with pytest.raises(TopicFull) as exc:
            q.publish_many("t", ["m"] * 1250, partition=0)   # 5 calls of 250: 4 in the first round trip
        e = exc.value
        assert len(e.published) == 1000 and e.used == 1200 and e.adding == 250
        assert "1,000 message(s) of this call were published" in str(e) and "Nothing was published" not in str(e)
        assert entries(q, q.keys("t", 0).msgs) == 1200
        assert all(q.get("t", i).state.value == "ready" for i in e.published[::97])
    finally:
        q.redis.close()
        other.redis.close()


def test_finding_the_pre_check_counts_what_a_record_costs(dq):
    """Review #38p4 finding 3: the pre-check of several calls summed payload bytes only, so a
    call it passed could be refused by publish.lua's count (header, id, overhead). Now it counts
    the same cost, so a publish it takes is taken whole, and one that would cross is refused first."""
    share = 1_000_000
    dq.configure_topic("t", max_payload_bytes=share)   # the test's shape first: the budget is per partition
    dq.configure_topic("t", max_bytes=share * dq.layout("t", fresh=True).partitions, max_payload_bytes=share)
    payloads = ["p" * 10] * 300   # two calls; 3,000 payload bytes but ~40 KB of records
    dq.publish("t", "x" * (share - 10_000 - 200), partition=0)   # leaves ~10 KB of room
    room = share - _exact_bytes(dq, "t", 0)
    assert 3_000 < room < 300 * (10 + RECORD_OVERHEAD_BYTES)
    with pytest.raises(TopicFull) as exc:
        dq.publish_many("t", payloads, partition=0, headers={"h": "v"})
    assert exc.value.published == () and exc.value.adding > 300 * (10 + RECORD_OVERHEAD_BYTES)
    assert entries(dq, dq.keys("t", 0).msgs) == 1   # refused before any call: nothing written


def test_a_topic_without_a_bytes_budget_keeps_no_byte_count(dq):
    """The exact count costs an HSTRLEN per record leaving the store: only a topic with a bytes
    budget keeps it, and dropping the budget drops the count."""
    dq.configure_topic("t", max_bytes=100_000)
    dq.publish("t", "a", partition=0)
    assert _counted(dq, "t", 0) == _exact_bytes(dq, "t", 0) > 0
    dq.configure_topic("t", max_bytes=None)
    assert _counted(dq, "t", 0) is None
    for group in dq.layout("t").groups:
        for d in dq.claim("t", count=10, group=group):
            dq.ack(d)
    dq.publish("t", "b", partition=0)   # an empty store, no budget: no count starts
    assert _counted(dq, "t", 0) is None
