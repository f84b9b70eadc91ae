import pytest

from queue_core import MessageState, RetryPolicy
from queue_core.keys import partition_of
from queue_core.message import Message

from .helpers import assert_counts, events, poll


@pytest.mark.single_partition   # claims rotate over partitions: oldest due first within each
def test_claim_is_fifo_by_due_time_with_new_token_and_attempt(dq):
    """Claim takes the oldest due first; each claim gets attempt + 1 and a fresh token (one per
    claim call: with the id it names one delivery)."""
    ids = dq.publish_many("t", ["a", "b", "c"])
    ds = dq.claim("t", 2)
    assert [d.id for d in ds] == ids[:2]
    assert [d.attempt for d in ds] == [1, 1]
    assert ds[0].token == ds[1].token
    assert_counts(dq, "t", ready=1, unacked=2)
    assert dq.claim("t", 1)[0].token != ds[0].token
    assert dq.get("t", ids[0]).state is MessageState.unacked


def test_a_sequence_number_repeated_after_a_failover_does_not_repeat_the_token(dq):
    """A failover can lose the last claims: the promoted replica hands out the same sequence
    numbers again. The worker that held a lost claim must not ack the message's new lease."""
    from queue_core import LeaseLost

    msg_id = dq.publish("t", "x")
    lost = dq.claim("t")[0]
    # What the failover does: on the new master that claim never happened.
    assert dq.release([lost]) == 1
    p = partition_of(msg_id)
    dq.redis.hincrby(dq.keys("t", p).g.stats, "seq", -1)
    again = dq.claim("t")[0]
    assert again.id == msg_id and again.token.split(".")[0] == lost.token.split(".")[0]
    assert again.token != lost.token
    with pytest.raises(LeaseLost):
        dq.ack(lost)
    dq.ack(again)
    assert_counts(dq, "t", ready=0, unacked=0)


def test_claim_sets_lease_from_visibility_timeout(dq):
    dq.configure_topic("t", visibility_timeout=12)
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    assert d.lease_deadline_ms - d.claimed_ms == 12_000
    m = dq.get("t", d.id)
    assert m.lease_deadline is not None and abs(m.lease_deadline.timestamp() * 1000 - d.lease_deadline_ms) < 1


def test_claim_promotes_due_pending(dq):
    """A bare claim loop sees delayed messages once due: no scheduler process needed."""
    dq.publish("t", "later", delay=0.05)
    assert dq.claim("t") == []
    assert_counts(dq, "t", pending=1)
    got = poll(lambda: dq.claim("t"))
    assert got[0].message.text() == "later"
    assert got[0].claimed_ms >= got[0].due_ms
    assert_counts(dq, "t", unacked=1)


def test_claim_reports_next_due_for_sleeping(dq):
    dq.publish("t", "x", delay=60)
    res = dq.claim_batch("t", 1)
    assert res.deliveries == []
    assert 59_000 <= res.next_due_ms - res.now_ms <= 60_000
    empty = dq.claim_batch("other", 1)
    assert empty.next_due_ms == -1


def test_claim_from_empty_topic(dq):
    assert dq.claim("nothing", 10) == []
    assert_counts(dq, "nothing")


def test_paused_topic_is_not_claimed_but_promotes(dq):
    dq.publish("t", "now")
    dq.pause("t")
    res = dq.claim_batch("t", 5)
    assert res.deliveries == [] and res.paused
    assert_counts(dq, "t", ready=1)
    dq.resume("t")
    assert len(dq.claim("t", 5)) == 1


def test_claim_records_lateness_event(dq):
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    claimed = [e for e in events(dq, "t") if e["event"] == "claimed"]
    assert claimed[0]["msg"] == d.id and int(claimed[0]["lateness_ms"]) == d.lateness_ms >= 0
    assert claimed[0]["attempt"] == "1"


def test_corrupt_metadata_is_quarantined_and_others_still_delivered(dq):
    """A message whose metadata is garbage goes to dead flagged corrupt; the rest are claimed."""
    ids = dq.publish_many("t", ["a", "b", "c"])
    dq.redis.hset(dq.keys("t", partition_of(ids[1])).msgs, ids[1], "{not json")
    ds = dq.claim("t", 10)
    assert [d.id for d in ds] == [ids[0], ids[2]]
    assert_counts(dq, "t", unacked=2, dead=1)
    bad = dq.get("t", ids[1])
    assert bad.state is MessageState.dead and "not valid delayq data" in bad.corrupt
    assert bad.last_error.type == "CorruptMessage" and "{not json" in bad.last_error.traceback
    assert dq.replay("t", [ids[1]]) == 0  # corrupt messages are never delivered
    assert dq.delete("t", [ids[1]]) == 1
    assert_counts(dq, "t", unacked=2)


def test_missing_record_is_quarantined(dq):
    mid = dq.publish("t", "a")
    dq.redis.hdel(dq.keys("t", partition_of(mid)).msgs, mid)
    assert dq.claim("t") == []
    assert dq.get("t", mid).corrupt == "message record missing (payload and header)"
    assert_counts(dq, "t", dead=1)


def test_negative_count_refused(dq):
    with pytest.raises(ValueError):
        dq.claim("t", -1)


def test_a_claimed_message_is_the_message_the_constructor_makes(dq):
    """claim_batch builds each message with Message.claimed (slots set directly, for speed): it
    must make exactly what Message(...) does with the same data, every slot included."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0.01))
    mid = dq.publish("t", {"a": 1}, key="k-1", headers={"tenant": "acme"}, ttl=600)
    [d] = dq.claim("t")
    dq.nack(d, "first")                      # a second delivery carries its delivery record
    [d] = poll(lambda: dq.claim("t"))
    m = d.message
    made = Message(m.id, m.topic, None, MessageState.unacked, group=m.group, partition=m.partition,
                   record=m._record, info=m._info_raw, attempts=d.attempt, score=d.lease_deadline_ms,
                   due_ms=d.due_ms)
    assert {s: getattr(m, s) for s in Message.__slots__} == {s: getattr(made, s) for s in Message.__slots__}
    assert (m.id, m.json(), m.key, m.headers, m.attempts, m.ttl, len(m.history)) == (
        mid, {"a": 1}, "k-1", {"tenant": "acme"}, 2, made.ttl, len(made.history))
    assert m == made


@pytest.mark.single_partition   # one claim takes them all, in due order
def test_one_claim_of_first_and_later_deliveries_gives_each_its_own_attempt_and_record(dq):
    """The claim's reply names the attempt and delivery record only of the messages that have
    them (claim.lua): in a claim that mixes them with first deliveries each message still gets
    its own, whatever its place."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0))   # a failed attempt is due again at once
    first = dq.publish_many("t", ["a", "b", "c"])
    ds = {d.id: d for d in dq.claim("t", 3)}
    dq.nack(ds[first[1]], "second one failed")
    dq.ack(ds[first[0]])
    dq.nack(ds[first[2]], "third one failed")
    later = dq.publish_many("t", ["d", "e"])
    got = {d.id: d for d in dq.claim("t", 10)}   # the retries first (due at their nack), then d, e
    assert {i: d.attempt for i, d in got.items()} == {first[1]: 2, first[2]: 2, later[0]: 1, later[1]: 1}
    assert [got[i].message.attempts for i in (first[1], first[2], *later)] == [2, 2, 1, 1]
    assert got[first[1]].message.last_error.message == "second one failed"
    assert got[first[2]].message.last_error.message == "third one failed"
    assert got[later[0]].message.last_error is None and got[later[0]].message._info_raw is None


@pytest.mark.single_partition   # the group's rate is split over partitions: one keeps it whole
def test_claim_batch_says_when_a_dispatch_limit_held_messages_back(dq):
    """The reply's paused field is 2 when not paused but throttled: ClaimResult.throttled, with
    next_due_ms the time the limit allows more (the worker counts these claims as waits)."""
    dq.configure_topic("t")
    dq.publish_many("t", ["a", "b", "c"])
    free = dq.claim_batch("t", 1)
    assert not free.throttled and not free.paused and free.next_due_ms == free.now_ms   # more ready, no limit
    dq.configure_group("t", "default", rate=(1, 60.0))
    first = dq.claim_batch("t", 2)
    assert len(first.deliveries) == 1 and first.throttled and not first.paused
    assert first.now_ms < first.next_due_ms <= first.now_ms + 60_000
    dq.pause("t")
    paused = dq.claim_batch("t", 2)
    assert paused.paused and not paused.throttled and not paused.deliveries


@pytest.mark.single_partition   # each partition keeps a burst of one: one partition, one message
def test_a_worker_counts_the_claims_a_limit_cut_short(dq):
    from queue_core import Worker
    from queue_core.contrib.metrics import WorkerMetrics

    from .test_worker import running

    dq.configure_topic("t")
    dq.configure_group("t", "default", rate=(1, 3600.0))     # one claim, then none for a while
    dq.publish_many("t", ["a", "b", "c"])
    metrics = WorkerMetrics("default", "w1")
    handled = []

    def waits():
        return metrics.registry.get_sample_value("delayq_worker_throttled_claims_total",
                                                 {"topic": "t", "group": "default"}) or 0
    with running(Worker(dq, {"t": lambda m: handled.append(m.id)}, metrics=metrics)):
        poll(lambda: handled and waits() >= 1)
    assert len(handled) == 1 and dq.counts("t")[MessageState.ready] == 2


def test_the_claim_tells_redis_time_to_the_microsecond(dq):
    """claim_batch's now_exact_ms is Redis TIME with its microseconds (what a worker's wait for a
    due time is measured against): within the whole ms now_ms gives, and between two TIME reads."""
    before = dq.redis.time()
    result = dq.claim_batch("t", 1)
    after = dq.redis.time()
    assert result.now_ms <= result.now_exact_ms < result.now_ms + 1
    assert before[0] * 1000 + before[1] / 1000 <= result.now_exact_ms <= after[0] * 1000 + after[1] / 1000


def test_finding_a_claim_of_thousands_loses_nothing(dq):
    """claim.lua passes two values a message through Lua's unpack (8,000 at most): a claim of
    4,000 or more failed after the messages had left ready, and they were gone from every state.
    A claim call now takes at most CALL_MOST; claim() makes as many as it needs."""
    from queue_core.engine.consume import CALL_MOST

    n = 4 * CALL_MOST + 100
    for start in range(0, n, 1000):
        dq.publish_many("t", [str(i) for i in range(start, min(n, start + 1000))])
    first = dq.claim_batch("t", n).deliveries   # one call: its ceiling
    assert len(first) == CALL_MOST
    claimed = first + dq.claim("t", n)           # the rest: several calls
    assert sorted(int(d.message.text()) for d in claimed) == list(range(n))
    assert_counts(dq, "t", unacked=n)
    dq.ack_many(claimed)
    assert_counts(dq, "t")
