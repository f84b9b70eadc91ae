"""undo (lua/undo.lua, lua/includes/hold.lua): purge, delete, cancel and kill with hold= keep what
they removed; undo puts exactly that set back in the state it left, once."""

import pytest

from queue_core import HoldExpired, InvalidArgument, MessageState, RetryPolicy

from .helpers import assert_counts, data_keys_empty, poll


def configure(q, **settings):
    """Set the queue's hold_* settings (on the asyncio client behind the blocking wrapper too)."""
    for name, value in settings.items():
        setattr(getattr(q, "_queue", q), name, value)


def snapshot(q, topic, ids):
    """What undo must give back, per id: state, due time, payload, headers, key, attempts, error,
    history (without the 'restored' entry undo adds)."""
    out = {}
    for i in ids:
        m = q.get(topic, i)
        err = m.last_error
        out[i] = (m.state, m.due_at, m.payload, m.headers, m.key, m.attempts, m.priority,
                  err and (err.type, err.message, err.fingerprint),
                  [(h.event, h.attempt, h.detail) for h in m.history if h.event != "restored"])
    return out


def test_purge_with_hold_then_undo_puts_back_exactly_what_it_removed(dq):
    ids = [dq.publish("t", {"n": n}, delay=600 + n, key=f"k{n}", headers={"h": n}) for n in range(30)]
    ready = dq.publish("t", b"\x00\xff binary", priority=3)
    before = snapshot(dq, "t", ids + [ready])
    assert dq.purge("t", "pending", hold="op1") == 30
    assert dq.purge("t", "ready", hold="op1") == 1
    assert_counts(dq, "t")
    assert dq.get("t", ids[0]) is None
    size = dq.held_size("t")
    assert size["messages"] == 31 and size["bytes"] > 31 * 20
    [holding] = dq.held("t")
    assert (holding.operation, holding.group, holding.messages, holding.not_held) == ("op1", "default", 31, 0)

    result = dq.undo("t", "op1", batch=7)
    assert result.restored == 31 and result.refused == {}
    assert_counts(dq, "t", pending=30, ready=1)
    assert snapshot(dq, "t", ids + [ready]) == before
    assert dq.find_by_key("t", "k3") == ids[3]
    assert dq.get("t", ids[0]).history[-1].event == "restored"
    assert dq.held_size("t") == {"messages": 0, "bytes": 0}
    [d] = dq.claim("t", 1)                           # the restored ready one is deliverable
    assert d.message.id == ready and d.message.payload == b"\x00\xff binary"


def test_undo_twice_puts_nothing_back_twice(dq):
    ids = dq.publish_many("t", ["a", "b", "c"], delay=600)
    dq.purge("t", "pending", hold="op")
    assert dq.undo("t", "op").restored == 3
    assert dq.undo("t", "op").restored == 0          # a second click, or a resumed run
    assert_counts(dq, "t", pending=3)
    assert sorted(m.id for m in dq.peek("t", "pending", limit=10)) == sorted(ids)


def test_delete_dead_with_hold_then_undo_rebuilds_the_error_group(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    ids = dq.publish_many("t", ["x"] * 5)
    for d in dq.claim("t", 5):
        dq.nack(d, ValueError("card declined"))
    before = snapshot(dq, "t", ids)
    assert dq.delete("t", ids, hold="op7") == 5
    assert dq.error_groups("t") == []
    assert dq.undo("t", "op7").restored == 5
    assert_counts(dq, "t", dead=5)
    [group] = dq.error_groups("t")
    assert group.count == 5 and group.error_type == "ValueError"
    assert snapshot(dq, "t", ids) == before
    assert dq.replay("t", ids) == 5                  # a restored letter replays as any other


def test_kill_with_hold_then_undo_moves_them_back_to_retrying(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600, max_attempts=10))
    ids = dq.publish_many("t", ["a", "b"])
    for d in dq.claim("t", 2):
        dq.nack(d, ValueError("timeout"))
    before = snapshot(dq, "t", ids)
    assert dq.kill_many("t", ids, hold="k1") == [0, 0]
    assert_counts(dq, "t", dead=2)
    assert dq.undo("t", "k1").restored == 2
    assert_counts(dq, "t", retrying=2)
    assert dq.error_groups("t") == []
    assert snapshot(dq, "t", ids) == before


def test_undo_of_a_kill_reports_a_letter_no_longer_dead(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(3600, max_attempts=10))
    a, b = dq.publish_many("t", ["a", "b"])
    for d in dq.claim("t", 2):
        dq.nack(d, "e")
    dq.kill_many("t", [a, b], hold="k2")
    dq.replay("t", [a])                              # an operator replayed one meanwhile
    result = dq.undo("t", "k2")
    assert result.restored == 1 and result.refused == {a: "not dead"}
    assert dq.get("t", a).state is MessageState.ready and dq.get("t", b).state is MessageState.retrying


def test_cancel_with_hold_then_undo(dq):
    ids = dq.publish_many("t", ["a", "b", "c"], delay=120)
    assert dq.cancel_many("t", ids, hold="c1") == [0, 0, 0]
    assert_counts(dq, "t")
    assert dq.undo("t", "c1").restored == 3
    assert_counts(dq, "t", pending=3)


def test_a_dedup_key_taken_meanwhile_is_reported_not_overwritten(dq):
    old = dq.publish("t", "old", key="order-1", delay=600)
    if "shadow" in dq.groups("t"):
        dq.delete_group("t", "shadow")               # else that group still holds the key
    dq.purge("t", "pending", hold="p1")
    new = dq.publish("t", "new", key="order-1", delay=600)
    result = dq.undo("t", "p1")
    assert result.restored == 0 and result.refused == {old: f"key {new}"}
    assert dq.get("t", new).payload == b"new" and dq.get("t", old) is None
    assert dq.held_size("t")["messages"] == 1        # still held, until its area expires


def test_undo_after_the_holding_area_expired_says_so(dq):
    configure(dq, hold_keep=0.3)
    dq.publish_many("t", ["a", "b"], delay=600)
    dq.purge("t", "pending", hold="gone")
    poll(lambda: dq.held("t") == [], timeout=5)
    with pytest.raises(HoldExpired, match="operation gone holds nothing.*expired.*nothing was put back"):
        dq.undo("t", "gone")
    assert_counts(dq, "t")


def test_undo_of_an_operation_that_held_nothing_says_so(dq):
    dq.publish("t", "a", delay=600)
    dq.purge("t", "pending")                         # no hold: destroyed as before
    with pytest.raises(HoldExpired):
        dq.undo("t", "never")
    dq.publish("t", "a", delay=600)
    with pytest.raises(InvalidArgument, match="hold must be"):
        dq.purge("t", "pending", hold="bad id with spaces")


def test_past_the_cap_messages_are_destroyed_and_counted(dq):
    configure(dq, hold_max_messages=2)
    dq.publish_many("t", ["x"] * 12, delay=600)
    partitions = dq.layout("t").partitions
    assert dq.purge("t", "pending", hold="capped") == 12
    [h] = dq.held("t")
    assert h.messages + h.not_held == 12 and h.messages <= 2 * partitions and h.not_held >= 12 - 2 * partitions
    assert dq.undo("t", "capped").restored == h.messages
    assert_counts(dq, "t", pending=h.messages)


def test_nothing_is_left_behind_after_undo_and_delete(dq):
    dq.publish_many("t", ["x"] * 4, delay=600)
    dq.purge("t", "pending", hold="z")
    dq.undo("t", "z")
    assert dq.purge("t", "pending") == 4
    assert data_keys_empty(dq, "t")


def test_ordered_group_restored_message_waits_behind_the_new_holder(dq):
    dq.configure_group("t", "default", ordered=True)
    first = dq.publish("t", "1", order_key="acct")
    dq.purge("t", "ready", hold="o1")
    second = dq.publish("t", "2", order_key="acct")   # takes the key meanwhile
    assert dq.undo("t", "o1").restored == 1
    m = dq.get("t", first)
    assert m.state is MessageState.pending and m.held_by == second
    [d] = dq.claim("t", 5)
    assert d.message.id == second
    dq.ack(d)
    assert poll(lambda: dq.get("t", first).state is MessageState.ready)


def test_an_undone_member_is_in_its_batch_again_and_ends_once(dq):
    with dq.batch("t", on_complete=("reports", "done")) as b:
        ids = b.publish_many(["a", "b", "c"], delay=600)
    dq.cancel_many("t", ids[:2], hold="b1")
    s = dq.batch_status("t", b.id).of("default")
    assert (s.total, s.pending) == (3, 1)
    assert dq.undo("t", "b1").restored == 2
    s = dq.batch_status("t", b.id).of("default")
    assert (s.total, s.pending, s.fired) == (3, 3, {})
    for i in ids:
        dq.deliver_now("t", i)
    for d in dq.claim("t", 10):
        dq.ack(d)
    s = dq.batch_status("t", b.id).of("default")
    assert (s.acked, s.pending) == (3, 0) and set(s.fired) == {"complete", "success"}   # none was removed in the end


def test_a_restored_message_is_in_the_index_again_and_keeps_its_ttl(dq):
    dq.configure_topic("t")
    dq.set_indexes("t", ["payload.customer"])
    ids = dq.publish_many("t", [{"customer": n % 3} for n in range(9)], delay=600, ttl=3600)
    entries = sum(dq.redis.zcard(dq.keys("t", p).p.ix) for p in range(dq.layout("t").partitions))
    want = sorted(i for n, i in enumerate(ids) if n % 3 == 1)
    dq.purge("t", "pending", hold="ix")
    assert dq.undo("t", "ix").restored == 9
    page = dq.search("t", "pending", "payload.customer:1", limit=50)
    assert sorted(m.id for m in page.messages) == want and page.scanned == 3   # read from the index
    assert sum(dq.redis.zcard(dq.keys("t", p).p.ix) for p in range(dq.layout("t").partitions)) == entries
    assert all(dq.get("t", i).ttl == 3600 for i in ids)
    expiry = sum(dq.redis.zcard(dq.keys("t", p).expiry) for p in range(dq.layout("t").partitions))
    assert expiry == 9                                # each still runs out when its TTL ends
