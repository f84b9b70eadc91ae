from datetime import UTC, datetime, timedelta

import pytest

from queue_core import (
    DelayTooLong,
    DuplicateMessage,
    InvalidArgument,
    InvalidTopic,
    MessageState,
    PayloadTooLarge,
)
from queue_core.errors import PayloadNotSerializable

from .helpers import assert_counts, events, server_ms


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
    assert_counts(dq, "t")


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
