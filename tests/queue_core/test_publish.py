import json
import pickle
from datetime import UTC, datetime, timedelta

import pytest

from queue_core import (
    DelayTooLong,
    DuplicateMessage,
    InvalidArgument,
    InvalidTopic,
    MessageState,
    PayloadTooLarge,
    RetryPolicy,
)
from queue_core.errors import PayloadNotSerializable

from .helpers import assert_counts, drain, entries, events, poll, server_ms


def test_publish_now_is_ready(dq):
    """A message without delay is ready at once and keeps its payload and headers."""
    mid = dq.publish("orders", {"n": 1}, headers={"trace": "abc"})
    assert_counts(dq, "orders", ready=1)
    m = dq.get("orders", mid)
    assert m.state is MessageState.ready and m.json() == {"n": 1} and m.headers == {"trace": "abc"}
    assert m.attempts == 0 and m.history[0].event == "published"


def test_publish_with_delay_is_pending_until_due_by_redis_clock(dq):
    """The due time is Redis now + delay, computed by the script."""
    before = server_ms(dq)
    mid = dq.publish("orders", b"x", delay=timedelta(seconds=30))
    after = server_ms(dq)
    assert_counts(dq, "orders", pending=1)
    due_ms = dq.get("orders", mid).due_at.timestamp() * 1000
    assert before + 30_000 <= due_ms <= after + 30_000


def test_publish_at_past_time_is_ready_now(dq):
    """An absolute time in the past means ready now."""
    dq.publish("orders", "late", at=datetime.now(UTC) - timedelta(hours=1))
    assert_counts(dq, "orders", ready=1)
    assert dq.claim("orders")[0].message.text() == "late"


def test_publish_at_future_time_is_pending(dq):
    mid = dq.publish("orders", "soon", at=datetime.now(UTC) + timedelta(minutes=5))
    assert_counts(dq, "orders", pending=1)
    assert dq.get("orders", mid).state is MessageState.pending


@pytest.mark.single_partition
def test_publish_many_one_batch(dq):
    """publish_many returns ids in order, each unique and time-ordered."""
    ids = dq.publish_many("orders", [f"m{i}" for i in range(2500)])
    assert len(set(ids)) == 2500 and ids == sorted(ids)
    assert_counts(dq, "orders", ready=2500)
    assert [d.message.text() for d in dq.claim("orders", 3)] == ["m0", "m1", "m2"]


def test_key_makes_publish_idempotent(dq):
    """Publishing an existing key returns the existing id and adds nothing."""
    a = dq.publish("orders", "first", key="order-1")
    b = dq.publish("orders", "second", key="order-1")
    assert a == b
    assert_counts(dq, "orders", ready=1)
    assert dq.get("orders", a).text() == "first"


def test_key_strict_raises_duplicate(dq):
    a = dq.publish("orders", "first", key="k")
    with pytest.raises(DuplicateMessage) as info:
        dq.publish("orders", "second", key="k", strict=True)
    assert info.value.existing_id == a
    assert_counts(dq, "orders", ready=1)


@pytest.mark.single_group   # with another group holding it, the message (and its key) lives on
def test_key_is_free_again_after_ack(dq):
    a = dq.publish("orders", "first", key="k")
    dq.ack(dq.claim("orders")[0])
    b = dq.publish("orders", "again", key="k")
    assert a != b
    assert_counts(dq, "orders", ready=1)


def test_payload_too_large_names_the_cap_and_writes_nothing(dq):
    dq.configure_topic("small", max_payload_bytes=10)
    dq.publish("small", "ok")
    with pytest.raises(PayloadTooLarge, match="11 bytes .* > 10 bytes"):
        dq.publish_many("small", ["fine", "x" * 11])
    assert_counts(dq, "small", ready=1)


@pytest.mark.parametrize("name", ["", "-lead", "has space", "a" * 129, "slash/no", "brace{x}"])
def test_invalid_topic_names_are_refused(dq, name):
    with pytest.raises(InvalidTopic, match="letter or digit first"):
        dq.publish(name, "x")


def test_valid_topic_names(dq):
    for name in ["a", "orders.v2", "team:orders_eu-1", "9" * 128]:
        dq.publish(name, "x")
        assert_counts(dq, name, ready=1)


def test_delay_beyond_max_is_refused(dq):
    dq.configure_topic("t", max_delay=60)
    with pytest.raises(DelayTooLong, match="61 s > 60 s"):
        dq.publish("t", "x", delay=61)
    assert_counts(dq, "t")


def test_default_max_delay_is_a_year(dq):
    with pytest.raises(DelayTooLong):
        dq.publish("t", "x", delay=timedelta(days=366))
    dq.publish("t", "x", delay=timedelta(days=364))
    assert_counts(dq, "t", pending=1)


def test_bad_arguments(dq):
    with pytest.raises(InvalidArgument, match="timezone-aware"):
        dq.publish("t", "x", at=datetime.now())
    with pytest.raises(InvalidArgument, match="not both"):
        dq.publish("t", "x", delay=5, at=datetime.now(UTC))
    with pytest.raises(InvalidArgument, match="negative"):
        dq.publish("t", "x", delay=-1)
    with pytest.raises(PayloadNotSerializable, match="object"):
        dq.publish("t", object())
    loop: dict = {"n": 1}
    loop["self"] = loop
    with pytest.raises(PayloadNotSerializable, match="recursion"):   # encoded without a per-call circular check
        dq.publish("t", loop)
    assert_counts(dq, "t")
    mid = dq.publish("t", {"é": [1.5, None, True, float("nan")], "s": "\u2028"})
    assert dq.get("t", mid).payload == b'{"\xc3\xa9":[1.5,null,true,NaN],"s":"\xe2\x80\xa8"}'   # as json.dumps wrote it


def test_publish_is_an_event_and_registers_the_topic(dq):
    mid = dq.publish("orders", "x", delay=5)
    ev = events(dq, "orders")
    assert [e["event"] for e in ev] == ["published"]
    assert ev[0]["msg"] == mid and int(ev[0]["due"]) > int(ev[0]["ts"])
    assert dq.topics() == ["orders"]
    assert dq.stats("orders")["published"] == 1


def test_empty_and_binary_payloads_roundtrip(dq):
    blob = bytes(range(256))
    a = dq.publish("t", b"")
    b = dq.publish("t", blob)
    assert dq.get("t", a).payload == b"" and dq.get("t", a).corrupt is None
    assert dq.get("t", b).payload == blob


@pytest.mark.single_partition
def test_a_server_that_lost_its_scripts_still_publishes_every_batch_once(dq):
    """A restarted or newly promoted server has no scripts cached: the pipelined batches of
    publish_many (sent by SHA) are reloaded and sent again, and nothing is written twice."""
    dq.publish("t", "warm")          # scripts loaded
    dq.redis.script_flush()
    ids = dq.publish_many("t", [str(i) for i in range(1200)])
    assert len(set(ids)) == 1200
    assert dq.counts("t")[MessageState.ready] == 1201


# -- dedup windows (publish(..., key=, dedup=, window=); lua/includes/dedup.lua, debounce.lua) -----

def _window(dq, topic: str, key: str) -> float | None:
    """The key's entry in its partition's window index (dedup_until), or None."""
    for p in range(dq.layout(topic, fresh=True).partitions):
        score = dq.redis.zscore(dq.keys(topic, p).dedup_until, key)
        if score is not None:
            return score
    return None


def _close_window(dq, topic: str, key: str) -> None:
    """Let the key's window close now (as if its time had passed)."""
    for p in range(dq.layout(topic, fresh=True).partitions):
        dq.redis.zadd(dq.keys(topic, p).dedup_until, {key: 1}, xx=True)


def test_publish_result_is_the_id_as_a_str_with_what_happened(dq):
    """publish() still returns the id (a str that compares, hashes and serialises as one); its
    outcome says whether this call stored a message."""
    a = dq.publish("t", "x", key="k")
    b = dq.publish("t", "y", key="k")
    assert isinstance(a, str) and a == b and {a: 1}[str(b)] == 1 and json.dumps([a]) == f'["{a}"]'
    assert (a.outcome, a.created, b.outcome, b.created) == ("published", True, "duplicate", False)
    assert pickle.loads(pickle.dumps(b)).outcome == "duplicate"
    assert dq.publish("t", "z").outcome == "published"


@pytest.mark.single_group   # with another group holding it, the message (and its key) lives on
def test_unique_for_keeps_the_key_for_the_window_after_the_ack(dq):
    """While the message lives its window waits (negative score); the ack opens it: the key stays
    held `window` seconds from then, publishes return the acked id and store nothing."""
    a = dq.publish("t", "first", key="k", dedup="unique_for", window=600)
    assert _window(dq, "t", "k") == -600_000
    before = server_ms(dq)
    dq.ack(dq.claim("t")[0])
    after = server_ms(dq)
    assert before + 600_000 <= _window(dq, "t", "k") <= after + 600_000
    again = dq.publish("t", "second", key="k", dedup="unique_for", window=600)
    plain = dq.publish("t", "third", key="k")
    assert again == plain == a and (again.outcome, plain.outcome) == ("duplicate", "duplicate")
    assert_counts(dq, "t")
    _close_window(dq, "t", "k")
    b = dq.publish("t", "fourth", key="k", dedup="unique_for", window=600)
    assert b != a and b.outcome == "published" and dq.get("t", b).text() == "fourth"
    assert _window(dq, "t", "k") == -600_000


@pytest.mark.single_group
def test_unique_for_window_closes_by_the_redis_clock(dq):
    """A short window really closes: a publish after it stores a new message."""
    a = dq.publish("t", "first", key="k", dedup="unique_for", window=0.2)
    dq.ack(dq.claim("t")[0])
    assert dq.publish("t", "again", key="k", dedup="unique_for", window=0.2).outcome == "duplicate"
    b = poll(lambda: (r := dq.publish("t", "later", key="k", dedup="unique_for", window=0.2)).created and r)
    assert b != a and dq.get("t", b).text() == "later"


@pytest.mark.single_group
def test_a_dead_letter_keeps_its_key_and_deleting_it_opens_the_window(dq):
    """A dead letter still exists (a replay keeps its id), so its key is held with no window yet;
    deleting it opens the unique_for window."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    a = dq.publish("t", "x", key="k", dedup="unique_for", window=600)
    dq.nack(dq.claim("t")[0], "boom")
    assert dq.publish("t", "y", key="k", dedup="unique_for", window=600).outcome == "duplicate"
    assert _window(dq, "t", "k") == -600_000
    assert dq.delete("t", [a]) == 1
    assert _window(dq, "t", "k") > server_ms(dq)
    assert dq.publish("t", "z", key="k", dedup="unique_for", window=600) == a
    assert_counts(dq, "t")


@pytest.mark.single_group
def test_throttle_drops_publishes_within_the_window_from_the_accepted_one(dq):
    """throttle holds the key `window` seconds from the accepted publish, even once the message is
    done: the dropped publishes return its id; strict refuses instead."""
    before = server_ms(dq)
    a = dq.publish("t", "first", key="k", dedup="throttle", window=60)
    assert before + 60_000 <= _window(dq, "t", "k") <= server_ms(dq) + 60_000
    b = dq.publish("t", "second", key="k", dedup="throttle", window=60)
    assert b == a and b.outcome == "throttled"
    dq.ack(dq.claim("t")[0])
    assert dq.publish("t", "third", key="k", dedup="throttle", window=60).outcome == "throttled"
    with pytest.raises(DuplicateMessage) as info:
        dq.publish("t", "fourth", key="k", dedup="throttle", window=60, strict=True)
    assert info.value.existing_id == a
    assert_counts(dq, "t")
    _close_window(dq, "t", "k")
    c = dq.publish("t", "fifth", key="k", dedup="throttle", window=60)
    assert c != a and c.outcome == "published"
    assert_counts(dq, "t", ready=1)


def test_a_throttled_publish_is_in_the_live_message_history(dq):
    a = dq.publish("t", "first", key="k", dedup="throttle", window=60, delay=30)
    dq.publish("t", "second", key="k", dedup="throttle", window=60, actor="alice")
    m = dq.get("t", a)
    assert m.text() == "first"
    assert [(h.event, h.actor) for h in m.history][-1] == ("throttled", "alice")


def test_debounce_replaces_the_pending_payload_and_pushes_its_due_time(dq):
    """The key's pending message takes the new payload and is due `delay` after this publish; one
    message, its history and the event stream say so."""
    a = dq.publish("t", "v1", key="k", dedup="debounce", delay=10)
    before = server_ms(dq)
    b = dq.publish("t", "v2", key="k", dedup="debounce", delay=20, actor="bob")
    after = server_ms(dq)
    assert b == a and b.outcome == "debounced"
    assert_counts(dq, "t", pending=1)
    m = dq.get("t", a)
    assert m.text() == "v2" and m.key == "k"
    assert before + 20_000 <= m.due_at.timestamp() * 1000 <= after + 20_000
    assert [(h.event, h.actor) for h in m.history][-1] == ("debounced", "bob")
    assert [e["event"] for e in events(dq, "t", group=None)] == ["published", "debounced"]


def test_debounce_with_no_delay_makes_the_message_ready_now(dq):
    a = dq.publish("t", "v1", key="k", dedup="debounce", delay=30)
    assert dq.publish("t", "v2", key="k", dedup="debounce").outcome == "debounced"
    assert_counts(dq, "t", ready=1)
    assert dq.claim("t")[0].message.text() == "v2" and dq.get("t", a).state is MessageState.unacked


def test_debounce_after_a_claim_publishes_a_new_message_that_takes_the_key(dq):
    """A started message is never rewritten: the running one handles its payload, a new message
    (holding the key from now) the latest."""
    a = dq.publish("t", "v1", key="k", dedup="debounce")
    d = dq.claim("t")[0]
    b = dq.publish("t", "v2", key="k", dedup="debounce", delay=5)
    assert b != a and b.outcome == "published"
    assert d.message.text() == "v1" and dq.get("t", a).text() == "v1" and dq.get("t", b).text() == "v2"
    assert dq.publish("t", "v3", key="k", dedup="debounce", delay=5) == b
    assert dq.get("t", b).text() == "v3"
    assert_counts(dq, "t", pending=1, unacked=1)


@pytest.mark.single_partition
def test_closed_windows_are_trimmed_so_the_index_stays_bounded(dq):
    """Each keyed publish trims up to 16 closed windows (and the ids of their gone messages): the
    index holds live keys and open windows, not history."""
    for i in range(40):
        dq.publish("t", "x", key=f"k{i}", dedup="throttle", window=60)
    drain(dq, "t")
    k = dq.keys("t", 0)
    assert dq.redis.zcard(k.dedup_until) == 40 and entries(dq, k.dedup) == 40
    for i in range(40):
        _close_window(dq, "t", f"k{i}")
    dq.publish("t", "y", key="other")
    assert dq.redis.zcard(k.dedup_until) == 24 and entries(dq, k.dedup) == 25
    dq.publish("t", "y", key="other2", dedup="unique_for", window=5)
    dq.publish("t", "y", key="other3")
    assert dq.redis.zcard(k.dedup_until) == 1 and entries(dq, k.dedup) == 3   # other2's live window


@pytest.mark.own_layout   # 3 partitions, one group: the shape's idle second group would keep every key
def test_closed_windows_leave_the_index_through_claims_alone(dq):
    """Issue 35 point 5, "the key index stays bounded by TTL": after a burst of keyed publishes and
    silence (no later keyed publish to trim them), the claims' upkeep drops the closed windows and
    the ids they kept, in every partition."""
    dq.configure_topic("t", partitions=3)
    ids = [dq.publish("t", i, key=f"k{i}", dedup="unique_for", window=1) for i in range(50)]
    assert len(set(ids)) == 50
    assert len(drain(dq, "t")) == 50
    parts = [dq.keys("t", p) for p in range(3)]

    def kept():
        return (sum(dq.redis.zcard(k.dedup_until) for k in parts), sum(entries(dq, k.dedup) for k in parts))

    assert kept() == (50, 50)                                   # open windows, acked and gone messages
    assert all(score > 0 for k in parts for _, score in dq.redis.zrange(k.dedup_until, 0, -1, withscores=True))
    assert sum(1 for k in parts if dq.redis.zcard(k.dedup_until)) > 1   # spread over the partitions
    poll(lambda: dq.claim("t") == [] and kept() == (0, 0), timeout=15, interval=0.05)
    assert_counts(dq, "t")                                      # nothing was published meanwhile


@pytest.mark.single_partition
def test_a_claim_trims_a_bounded_number_of_closed_windows(dq):
    """The claim's trim is upkeep, bounded per call like the rest: 64 closed windows at most."""
    for i in range(100):
        dq.publish("t", "x", key=f"k{i}", dedup="throttle", window=60)
    drain(dq, "t")
    k = dq.keys("t", 0)
    dq.claim("t")
    assert dq.redis.zcard(k.dedup_until) == 100                 # open windows stay
    for i in range(100):
        _close_window(dq, "t", f"k{i}")
    dq.claim("t")
    assert dq.redis.zcard(k.dedup_until) == 36 and entries(dq, k.dedup) == 36
    dq.claim("t")
    assert dq.redis.zcard(k.dedup_until) == 0 and entries(dq, k.dedup) == 0


def test_dedup_arguments_are_checked(dq):
    with pytest.raises(InvalidArgument, match="needs a key"):
        dq.publish("t", "x", dedup="throttle", window=5)
    with pytest.raises(InvalidArgument, match="needs window"):
        dq.publish("t", "x", key="k", dedup="unique_for")
    with pytest.raises(InvalidArgument, match="takes no window"):
        dq.publish("t", "x", key="k", dedup="debounce", window=5)
    with pytest.raises(InvalidArgument, match="one of unique_for, throttle, debounce"):
        dq.publish("t", "x", key="k", dedup="once", window=5)
    with pytest.raises(InvalidArgument, match="window= needs dedup"):
        dq.publish("t", "x", key="k", window=5)
    with pytest.raises(InvalidArgument, match="must be positive"):
        dq.publish("t", "x", key="k", dedup="throttle", window=0)
    assert_counts(dq, "t")


@pytest.mark.single_partition
def test_debounce_keeps_a_ready_message_listed_once_by_its_fairness_key_and_priority(dq):
    """A debounced ready message leaves and re-enters ready through the dispatch helpers: its
    fairness entry is replaced (not doubled) and its priority kept."""
    a = dq.publish("t", "v1", key="k", dedup="debounce", fairness_key="acme", priority=5)
    other = dq.publish("t", "other", fairness_key="zed")
    assert dq.publish("t", "v2", key="k", dedup="debounce", fairness_key="acme", priority=5).outcome == "debounced"
    k = dq.keys("t", 0)
    assert dq.redis.zcard(k.fidx) == 2
    m = dq.get("t", a)
    assert (m.text(), m.priority, m.fairness_key, m.state) == ("v2", 5, "acme", MessageState.ready)
    assert [d.id for d in dq.claim("t", 10)] == [a, other]        # priority 5 first
    assert dq.redis.zcard(k.fidx) == 0


@pytest.mark.single_group   # names its own groups
def test_a_unique_for_window_opens_when_the_last_group_is_done(dq):
    dq.configure_topic("t")
    dq.configure_group("t", "billing")
    a = dq.publish("t", "x", key="k", dedup="unique_for", window=600)
    dq.ack(dq.claim("t")[0])
    assert _window(dq, "t", "k") == -600_000                      # billing still holds the message
    dq.ack(dq.claim("t", group="billing")[0])
    assert _window(dq, "t", "k") > server_ms(dq)
    assert dq.publish("t", "y", key="k", dedup="unique_for", window=600) == a


def test_finding_a_debounce_rewrites_only_a_message_published_to_be_debounced(dq):
    """A review found any publisher could rewrite another producer's unstarted message by
    publishing its plain idempotency key with dedup='debounce'. Only a message itself published
    with dedup='debounce' is rewritten; any other holder answers 'duplicate'."""
    order = dq.publish("t", {"amount": 10}, key="order-42", delay=60)
    again = dq.publish("t", {"amount": 99999}, key="order-42", dedup="debounce")
    assert again == order and again.outcome == "duplicate"
    assert dq.get("t", order).json() == {"amount": 10} and dq.get("t", order).state is MessageState.pending
    d1 = dq.publish("t", {"v": 1}, key="deb", dedup="debounce", delay=60)
    d2 = dq.publish("t", {"v": 2}, key="deb", dedup="debounce", delay=60)
    assert d2 == d1 and d2.outcome == "debounced" and dq.get("t", d1).json() == {"v": 2}


@pytest.mark.parametrize("window", [float("nan"), float("inf"), 1e300, "soon"])
def test_finding_a_window_that_is_no_number_of_seconds_is_refused(dq, window):
    """A review found window=nan and inf raised ValueError/OverflowError, and 1e300 held a key forever."""
    with pytest.raises(InvalidArgument, match="window must"):
        dq.publish("t", "x", key="k", dedup="throttle", window=window)


def test_finding_a_key_with_a_nul_is_refused(dq):
    with pytest.raises(InvalidArgument, match="without NUL"):
        dq.publish("t", "x", key="a\0b")
