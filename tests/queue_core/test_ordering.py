"""Ordered groups: at most one message per ordering key in flight (unacked or retrying), the
messages of one key handled in publish order, other keys never held up."""

import threading
from collections import defaultdict

from queue_core import MessageState, RetryPolicy, Worker
from queue_core.keys import partition_of

from .helpers import assert_counts, data_keys_empty, poll
from .test_worker import running


def ordered(dq, topic="t", **options):
    dq.configure_group(topic, "default", ordered=True, retry=RetryPolicy.fixed(0, max_attempts=2), **options)


def test_one_message_per_key_in_flight_in_publish_order(dq):
    ordered(dq)
    a1, a2, a3 = (dq.publish("t", f"a{i}", order_key="acct-a") for i in range(3))
    b1 = dq.publish("t", "b1", order_key="acct-b")
    free = dq.publish("t", "no key")
    got = dq.claim("t", 10)
    assert sorted(d.id for d in got) == sorted([a1, b1, free])   # a2, a3 wait; other keys do not
    assert_counts(dq, "t", pending=2, unacked=3)
    held = dq.get("t", a2)
    assert held.state is MessageState.pending and held.held and held.held_by == a1 and held.due_at is None
    dq.ack_many(got)
    nxt = dq.claim("t", 10)
    assert [d.id for d in nxt] == [a2]                            # the next of acct-a, alone
    dq.ack(nxt[0])
    assert [d.id for d in dq.claim("t", 10)] == [a3]


def test_order_survives_retries(dq):
    ordered(dq)
    first, second = dq.publish("t", "1", order_key="k"), dq.publish("t", "2", order_key="k")
    d = dq.claim("t", 5)[0]
    assert d.id == first and dq.nack(d, "try again") is MessageState.retrying
    assert [x.id for x in dq.claim("t", 5)] == [first]            # retrying still holds the key
    assert dq.get("t", second).held


def test_a_dead_letter_releases_its_key_by_default(dq):
    ordered(dq)
    first, second = dq.publish("t", "1", order_key="k"), dq.publish("t", "2", order_key="k")
    assert dq.reject(dq.claim("t")[0], "poison") is MessageState.dead
    assert [d.id for d in dq.claim("t", 5)] == [second]
    assert dq.replay("t", [first]) == 1
    assert dq.get("t", first).held                                # back in line behind the active one


def test_hold_key_on_dead_keeps_it_until_replayed_or_deleted(dq):
    ordered(dq, hold_key_on_dead=True)
    first, second = dq.publish("t", "1", order_key="k"), dq.publish("t", "2", order_key="k")
    dq.reject(dq.claim("t")[0], "poison")
    assert dq.claim("t", 5) == [] and dq.get("t", second).held
    assert dq.replay("t", [first]) == 1
    again = dq.claim("t", 5)
    assert [d.id for d in again] == [first]                       # it still holds the key
    dq.ack(again[0])
    assert [d.id for d in dq.claim("t", 5)] == [second]


def test_deleting_the_dead_holder_passes_the_key_on(dq):
    ordered(dq, hold_key_on_dead=True)
    first, second = dq.publish("t", "1", order_key="k"), dq.publish("t", "2", order_key="k")
    dq.reject(dq.claim("t")[0], "poison")
    assert dq.delete("t", [first]) == 1
    assert [d.id for d in dq.claim("t", 5)] == [second]


def test_cancelling_a_held_message_removes_it_from_the_line(dq):
    ordered(dq)
    first, second, third = (dq.publish("t", str(i), order_key="k") for i in range(3))
    dq.cancel("t", second)
    dq.ack(dq.claim("t")[0])
    assert [d.id for d in dq.claim("t", 5)] == [third]
    assert dq.redis.zcard(dq.keys("t", partition_of(first)).waiting) == 0


def test_an_unordered_group_gets_everything_at_once(dq):
    ordered(dq)
    dq.configure_group("t", "fast")
    dq.publish_many("t", ["1", "2", "3"], order_key="k")
    assert len(dq.claim("t", 5, group="fast")) == 3
    assert len(dq.claim("t", 5)) == 1


def test_delayed_messages_keep_publish_order(dq):
    """The later-published message is due first, yet waits for the earlier one of its key."""
    ordered(dq)
    first = dq.publish("t", "1", order_key="k", delay=0.1)
    second = dq.publish("t", "2", order_key="k")
    assert dq.claim("t", 5) == []
    got = poll(lambda: dq.claim("t", 5))
    assert [d.id for d in got] == [first]
    dq.ack(got[0])
    assert [d.id for d in dq.claim("t", 5)] == [second]


def test_worker_handles_each_key_in_order_with_many_threads(dq):
    ordered(dq)
    keys = [f"acct-{i}" for i in range(5)]
    sent = defaultdict(list)
    for n in range(20):
        for k in keys:
            sent[k].append(dq.publish("t", f"{k}:{n}", order_key=k))
    handled = defaultdict(list)
    in_flight: dict[str, int] = defaultdict(int)
    overlap = []
    lock = threading.Lock()

    def handler(m):
        with lock:
            in_flight[m.order_key] += 1
            if in_flight[m.order_key] > 1:
                overlap.append(m.order_key)
        handled[m.order_key].append(m.id)
        with lock:
            in_flight[m.order_key] -= 1
    with running(Worker(dq, {"t": handler}, concurrency=4)):
        poll(lambda: sum(len(v) for v in handled.values()) == 100 and sum(dq.counts("t").values()) == 0, timeout=20)
    assert overlap == []
    assert dict(handled) == dict(sent)
    layout = dq.layout("t")
    assert data_keys_empty(dq, "t")
    assert not any(dq.redis.hlen(dq.keys("t", p).active) for p in range(layout.partitions))
