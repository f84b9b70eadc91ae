"""Chains: publish(..., after=<id>, group=, delay=) waits until that group acks the parent
(lua/includes/chain.lua, released inside ack.lua)."""

from collections import Counter
from datetime import UTC, datetime

import pytest

from queue_core import InvalidArgument, LeaseLost, MessageNotFound, MessageState, RetryPolicy, StateConflict
from queue_core.keys import partition_of

from .helpers import WorkerProcesses, assert_counts, events, poll, server_ms


def test_a_chained_message_waits_for_its_parent(dq):
    """It is pending in the parent's group, not due, and says which message it waits for."""
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent, delay=300)
    assert child.outcome == "published"
    m = dq.get("t", child)
    assert m.state is MessageState.pending and m.waiting_for == parent and m.due_at is None
    assert not m.held   # waiting for its parent, not held behind an ordering key
    assert dq.get("t", parent).waiting_for is None
    assert_counts(dq, "t", pending=1, ready=1)
    assert [d.message.text() for d in dq.claim("t", 10)] == ["A"]


def test_the_ack_releases_it_with_the_delay_counted_from_the_ack(dq):
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent, delay=300)
    d = dq.claim("t")[0]
    before = server_ms(dq)
    dq.ack(d)
    after = server_ms(dq)
    m = dq.get("t", child)
    assert m.state is MessageState.pending and m.waiting_for is None
    assert before + 300_000 <= m.due_at.timestamp() * 1000 <= after + 300_000
    released = [e for e in events(dq, "t") if e["event"] == "released"]
    assert [(e["msg"], e["from"]) for e in released] == [(child, parent)]


def test_with_no_delay_the_child_is_ready_at_the_ack(dq):
    parent = dq.publish("t", "A")
    kids = dq.publish_many("t", ["B1", "B2"], after=parent)
    dq.ack(dq.claim("t")[0])
    assert_counts(dq, "t", ready=2)
    assert sorted(d.message.text() for d in dq.claim("t", 10)) == ["B1", "B2"]
    assert {dq.get("t", k).state for k in kids} == {MessageState.unacked}


def test_chains_of_chains_run_in_order(dq):
    a = dq.publish("t", "A")
    b = dq.publish("t", "B", after=a)
    dq.publish("t", "C", after=b)
    seen = []
    while batch := dq.claim("t", 10):
        seen += [d.message.text() for d in batch]
        dq.ack_many(batch)
    assert seen == ["A", "B", "C"]
    assert_counts(dq, "t")


def test_a_dead_parent_keeps_its_children_waiting_and_its_replay_releases_them(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent)
    dq.nack(dq.claim("t")[0], "boom")
    assert dq.get("t", child).waiting_for == parent
    assert_counts(dq, "t", pending=1, dead=1)
    assert dq.replay("t", [parent]) == 1
    dq.ack(dq.claim("t")[0])
    assert dq.claim("t")[0].message.text() == "B"


def test_a_parent_removed_without_an_ack_makes_its_children_dead_letters(dq):
    """Cancelled, deleted or expired: the children are dead with ParentGone (nothing vanishes),
    and a replay publishes one like any other dead letter."""
    parent = dq.publish("t", "A", delay=60)
    child = dq.publish("t", "B", after=parent)
    dq.cancel("t", parent)
    m = dq.get("t", child)
    assert m.state is MessageState.dead and m.waiting_for is None
    assert m.last_error.type == "ParentGone" and parent in m.last_error.message
    assert m.history[-1].event == "parent_gone"
    assert_counts(dq, "t", dead=1)
    assert dq.replay("t", [child]) == 1
    assert dq.claim("t")[0].message.text() == "B"


def test_a_cancelled_child_leaves_its_parent_free(dq):
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent)
    dq.cancel("t", child)
    dq.ack(dq.claim("t")[0])
    assert_counts(dq, "t")
    k = dq.keys("t", partition_of(parent))
    assert dq.redis.hlen(k.chain_parent) == 0 and dq.redis.zcard(k.chain_children) == 0


def test_a_stale_ack_after_a_redelivery_releases_nothing_twice(dq):
    """The lease's token fences the release: only the ack that holds the lease releases."""
    dq.configure_topic("t", visibility_timeout=0.05, retry=RetryPolicy.fixed(0))
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent)
    first = dq.claim("t")[0]
    second = poll(lambda: dq.claim("t"))[0]          # the lease ran out: redelivered
    assert second.id == parent and second.attempt == 2
    dq.ack(second)
    with pytest.raises(LeaseLost):
        dq.ack(first)
    assert [e["msg"] for e in events(dq, "t") if e["event"] == "released"] == [child]
    assert_counts(dq, "t", ready=1)


def test_publishing_after_a_message_that_cannot_release_it_is_refused(dq):
    done = dq.publish("t", "A")
    dq.ack(dq.claim("t")[0])
    with pytest.raises(MessageNotFound, match="nothing would release"):
        dq.publish("t", "B", after=done)
    live = dq.publish("t", "C")
    with pytest.raises(InvalidArgument, match="no consumer group 'nobody'"):
        dq.publish("t", "B", after=live, group="nobody")
    with pytest.raises(InvalidArgument, match="give delay=, not at="):
        dq.publish("t", "B", after=live, at=datetime.now(UTC))
    with pytest.raises(InvalidArgument, match="no order_key"):
        dq.publish("t", "B", after=live, order_key="o")
    assert_counts(dq, "t", ready=1)


@pytest.mark.single_partition
def test_at_most_a_hundred_children_wait_on_one_parent(dq):
    parent = dq.publish("t", "A")
    dq.publish_many("t", [str(i) for i in range(99)], after=parent)
    with pytest.raises(StateConflict, match="99 messages already wait"):
        dq.publish_many("t", ["x", "y"], after=parent)
    dq.publish("t", "last", after=parent)
    assert_counts(dq, "t", ready=1, pending=100)


@pytest.mark.slow
@pytest.mark.single_partition
def test_each_child_is_released_exactly_once_while_workers_are_killed(dq, engine_url):
    """200 parents with a child each, two worker processes, one of them SIGKILLed (and restarted)
    each time 20 more deliveries were handled: every child is released once (one 'released' event,
    one message) and handled."""
    # A kill expires every lease the worker held, prefetched ones too: enough attempts that no
    # parent dies of kills (a dead parent keeps its child waiting, by the rule).
    dq.configure_topic("jobs", visibility_timeout=1, retry=RetryPolicy.fixed(0, max_attempts=1000))
    parents = dq.publish_many("jobs", [f"parent-{i}" for i in range(200)])
    children = [dq.publish("jobs", f"child-{i}", after=p) for i, p in enumerate(parents)]

    def handled():
        return [h.decode().split(":")[0] for h in dq.redis.lrange("test:handled", 0, -1)]

    with WorkerProcesses(engine_url, "jobs", "tests.queue_core.handlers:record_with_work") as workers:
        while not set(handled()) >= set(children):
            seen = len(handled())
            try:
                poll(lambda seen=seen: len(handled()) >= seen + 20 or set(handled()) >= set(children), timeout=60)
            except AssertionError:
                raise AssertionError(f"stalled after {workers.kills} kills: {dq.counts('jobs')}, "
                                     f"{len(set(children) - set(handled()))} children not handled") from None
            if workers.kills < 10:
                workers.kill_one()
    kills = workers.kills
    released = Counter(e["msg"] for e in events(dq, "jobs") if e["event"] == "released")
    assert kills >= 3 and released == Counter(children)
    assert dq.stats("jobs")["published"] == 400
    poll(lambda: sum(dq.counts("jobs").values()) == 0, timeout=30)   # the killed leases ran out


@pytest.mark.single_group   # names its own groups
def test_only_the_named_group_receives_it_and_only_its_ack_releases_it(dq):
    dq.configure_topic("t")
    dq.configure_group("t", "billing")
    parent = dq.publish("t", "A")
    child = dq.publish("t", "invoice", after=parent, group="billing", delay=0)
    assert dq.get("t", child, group="default") is None
    dq.ack(dq.claim("t")[0])                                       # default's ack releases nothing
    assert dq.get("t", child, group="billing").waiting_for == parent
    [d] = dq.claim("t", 10, group="billing")
    assert d.message.text() == "A"
    dq.ack(d)
    assert [d.message.text() for d in dq.claim("t", 10, group="billing")] == ["invoice"]
    assert dq.counts("t")[MessageState.ready] == 0 and dq.get("t", child, group="default") is None


@pytest.mark.single_group
def test_a_waiting_message_whose_ttl_runs_out_leaves_the_chain(dq):
    """Its TTL counts from the publish, as for any message: it expires while waiting (dead,
    Expired) and unlinks itself, so the parent's ack later releases nothing."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0))
    parent = dq.publish("t", "A")
    child = dq.publish("t", "B", after=parent, ttl=0.05)
    k = dq.keys("t", 0)
    poll(lambda: not dq.claim("t", 0) and dq.get("t", child).state is MessageState.dead, timeout=5)
    assert dq.get("t", child).last_error.type == "Expired"
    assert dq.redis.hlen(k.chain_parent) == 0 and dq.redis.zcard(k.chain_children) == 0
    assert dq.get("t", child).waiting_for is None
    dq.ack(dq.claim("t")[0])
    assert dq.get("t", child).state is MessageState.dead                 # not released by the ack


def test_finding_purging_pending_parents_leaves_no_ghost_dead_letters(dq):
    """A review found purge read its rows once: purging a parent made its child a dead letter
    (ParentGone), then the child's stale 'pending' row freed its record, leaving a dead letter
    that read as corrupt."""
    for _ in range(20):
        parent = dq.publish("t", "P", delay=3600)
        child = dq.publish("t", "C", after=parent)
        dq.purge("t", "pending")
        m = dq.get("t", child)
        assert m is None or not m.corrupt, m
        dq.purge("t", "dead")


def test_finding_after_refuses_what_it_cannot_do_whole(dq):
    """A review found publish_many(after=) of more than one script call's worth wrote part and
    said nothing was written, and debounce with after= dropped the chain (the message ran before
    its parent)."""
    parent = dq.publish("t", "P", delay=3600)
    with pytest.raises(InvalidArgument, match="at most 100 messages wait on one parent"):
        dq.publish_many("t", ["c"] * 260, after=parent)
    dq.publish("t", "x", key="k", dedup="debounce")
    with pytest.raises(InvalidArgument, match="cannot be combined with after="):
        dq.publish("t", "y", key="k", dedup="debounce", after=parent)
    assert dq.counts("t")[MessageState.pending] == 1


def test_finding_one_ack_releases_at_most_a_budget_of_children_and_the_next_claim_the_rest(dq):
    # One ack of 500 parents with 100 waiting children each released 50,000 children in one script
    # (~0.75 s of Redis). Now a call releases at most 1,000; the rest wait, recorded as acked in
    # the same call, and the group's next ack or claim releases them, due times from the ack.
    parents = dq.publish_many("t", [f"P{i}" for i in range(15)], partition=0)
    for i, parent in enumerate(parents):
        dq.publish_many("t", [f"C{i}.{j}" for j in range(100)], after=parent, delay=0 if i < 12 else 600)
    deliveries = dq.claim("t", 15)
    assert len(deliveries) == 15
    before = server_ms(dq)
    dq.ack_many(deliveries)
    after = server_ms(dq)
    assert_counts(dq, "t", ready=1000, pending=500)        # ten parents' children; five parents' wait
    k = dq.keys("t", 0, "default")
    assert dq.redis.zcard(k.chain_acked) == 5
    got = dq.claim("t", 1000)                               # this claim releases the five first
    assert dq.redis.zcard(k.chain_acked) == 0 and len(got) == 1000
    assert_counts(dq, "t", unacked=1000, ready=200, pending=300)
    late = dq.peek("t", "pending", limit=300)
    assert all(before + 600_000 <= m.due_at.timestamp() * 1000 <= after + 600_000 for m in late)
    released = Counter(e["msg"] for e in events(dq, "t") if e["event"] == "released")
    assert len(released) == 1500 and set(released.values()) == {1}
