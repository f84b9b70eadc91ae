"""Batches with callbacks: ``with q.batch(on_complete=..., on_success=..., on_dead=...) as b``
(engine/batch.py, lua/batch.lua); members counted per group inside the scripts that end them
(lua/includes/batch.lua)."""

import json
from collections import Counter

import pytest

from queue_core import (
    AsyncDelayQueue,
    DelayQueue,
    InvalidArgument,
    MessageNotFound,
    MessageState,
    PayloadTooLarge,
    RetryPolicy,
    StateConflict,
    Worker,
)
from queue_core.engine.batch import CALLBACK_MAX_BYTES
from queue_core.errors import PayloadNotSerializable
from queue_core.keys import partition_of
from tests.conftest import run_async

from .helpers import WorkerProcesses, poll, running

CALLBACKS = {"on_complete": ("reports", {"done": "campaign-7"}), "on_success": ("reports", "all good"),
             "on_dead": ("alerts", b"\xff some died")}


def callbacks(dq, topic="reports"):
    """The callback messages published to ``topic``: (event, batch id, payload bytes), by claiming them."""
    out = []
    for d in dq.claim(topic, 100):
        h = d.message.headers
        out.append((h["delayq-batch-event"], h["delayq-batch"], d.message.payload))
        dq.ack(d)
    return sorted(out)


def drain(dq, topic="t", n=100):
    for d in dq.claim(topic, n):
        dq.ack(d)


def test_the_callbacks_fire_once_when_every_member_is_acked(dq):
    with dq.batch("t", **CALLBACKS) as b:
        ids = [b.publish("a"), *b.publish_many(["b", "c"])]
    assert {partition_of(i) for i in ids} == {b.partition}
    s = dq.batch_status("t", b.id).of("default")
    assert (s.total, s.acked, s.dead, s.pending, s.fired) == (3, 0, 0, 3, {})
    assert callbacks(dq) == []
    drain(dq)
    got = callbacks(dq)
    assert got == [("complete", b.id, b'{"done":"campaign-7"}'), ("success", b.id, b"all good")]
    assert callbacks(dq, "alerts") == []
    s = dq.batch_status("t", b.id)
    assert s.sealed and s.of("default").acked == 3 and s.of("default").pending == 0
    assert set(s.of("default").fired) == {"complete", "success"} and s.of("default").unsent == ()
    assert dq.forward_batch_callbacks("t") == 0 and callbacks(dq) == []   # nothing fires twice


def test_an_open_batch_does_not_complete_before_its_seal(dq):
    """Every member acked inside the block: nothing fires until the block ends."""
    with dq.batch("t", **CALLBACKS) as b:
        b.publish("a")
        drain(dq)
        assert dq.batch_status("t", b.id).of("default").pending == 0
        assert dq.forward_batch_callbacks("t") == 0 and callbacks(dq) == []
        b.publish("b")
    drain(dq)
    assert [e for e, _, _ in callbacks(dq)] == ["complete", "success"]


def test_an_empty_batch_completes_and_succeeds_at_its_seal(dq):
    with dq.batch("t", **CALLBACKS) as b:
        pass
    s = dq.batch_status("t", b.id).of("default")
    assert (s.total, s.pending) == (0, 0)
    assert [e for e, _, _ in callbacks(dq)] == ["complete", "success"]


def test_a_block_that_raises_leaves_the_batch_open(dq):
    with pytest.raises(RuntimeError), dq.batch("t", **CALLBACKS) as b:
        b.publish("a")
        raise RuntimeError("stop")
    drain(dq)
    assert not dq.batch_status("t", b.id).sealed and callbacks(dq) == []
    b.seal()
    assert [e for e, _, _ in callbacks(dq)] == ["complete", "success"]
    with pytest.raises(StateConflict):
        b.seal()


def test_a_nack_to_dead_fires_dead_at_once_and_complete_at_the_end(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    with dq.batch("t", **CALLBACKS) as b:
        b.publish_many(["a", "b"])
    first, second = dq.claim("t", 2)
    dq.nack(first, ValueError("boom"))
    assert callbacks(dq, "alerts") == [("dead", b.id, b"\xff some died")]
    assert callbacks(dq) == []
    dq.ack(second)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]   # one dead: no success
    s = dq.batch_status("t", b.id).of("default")
    assert (s.acked, s.dead, s.pending) == (1, 1, 0)
    dq.delete("t", [first.message.id])             # a dead letter deleted ended already
    assert dq.batch_status("t", b.id).of("default").dead == 1
    assert callbacks(dq) == [] and callbacks(dq, "alerts") == []


def test_a_replayed_dead_member_then_acked_makes_the_batch_succeed_once(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    with dq.batch("t", **CALLBACKS) as b:
        dead = b.publish("a")
        b.publish("b")
    for d in dq.claim("t", 2):
        dq.nack(d, ValueError("x")) if d.message.id == dead else dq.ack(d)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]
    dq.replay("t", [dead])
    assert dq.batch_status("t", b.id).of("default").pending == 1
    drain(dq)
    assert [e for e, _, _ in callbacks(dq)] == ["success"]
    assert len(callbacks(dq, "alerts")) == 1 and dq.forward_batch_callbacks("t") == 0


def test_kill_cancel_and_delete_end_members(dq):
    """kill (retrying -> dead) counts dead; cancel and delete of a waiting member count removed."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(60, max_attempts=5))
    with dq.batch("t", **CALLBACKS) as b:
        retrying = b.publish("r")
        cancelled = b.publish("c", delay=60)
        deleted = b.publish("d", delay=60)
        acked = b.publish("a")
    for d in dq.claim("t", 10):
        dq.nack(d, ValueError("later")) if d.message.id == retrying else dq.ack(d)
    assert dq.get("t", retrying).state is MessageState.retrying and acked
    dq.kill("t", retrying)
    assert [e for e, _, _ in callbacks(dq, "alerts")] == ["dead"]
    dq.cancel("t", cancelled)
    assert callbacks(dq) == []
    dq.delete("t", [deleted], state=MessageState.pending)
    s = dq.batch_status("t", b.id).of("default")
    assert (s.total, s.acked, s.dead, s.removed, s.pending) == (4, 1, 1, 2, 0)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]


def test_a_cancel_of_a_running_member_counts_it_dead(dq):
    with dq.batch("t", **CALLBACKS) as b:
        b.publish("a")
    [d] = dq.claim("t")
    dq.cancel("t", d.message.id, running=True)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]
    assert [e for e, _, _ in callbacks(dq, "alerts")] == ["dead"]


@pytest.mark.parametrize("on_expire", ["dead", "drop"])
def test_ttl_expiry_ends_a_member(dq, on_expire):
    """Dead (Expired) counts dead; dropped on expiry counts removed. Either completes the batch."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", on_expire=on_expire)
    with dq.batch("t", **CALLBACKS) as b:
        b.publish("old", ttl=0.05)
    # Expiry happens in a claim's upkeep (claim.lua), whose callbacks a worker's heartbeat forwards.
    poll(lambda: dq.claim("t", 0) == [] and dq.batch_status("t", b.id).of("default").pending == 0, timeout=5)
    s = dq.batch_status("t", b.id).of("default")
    assert (s.dead, s.removed) == ((1, 0) if on_expire == "dead" else (0, 1))
    assert callbacks(dq) == [] and s.unsent == (("complete", "dead") if on_expire == "dead" else ("complete",))
    assert dq.forward_batch_callbacks("t") == (2 if on_expire == "dead" else 1)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]
    assert len(callbacks(dq, "alerts")) == (1 if on_expire == "dead" else 0)


def test_a_purge_removes_members_and_a_worker_heartbeat_forwards_what_no_call_did(dq):
    """purge (like expiry inside a claim) ends members without forwarding: the callback waits in
    the outbox until a worker's heartbeat, which comes first thing when a worker starts."""
    with dq.batch("t", **CALLBACKS) as b:
        b.publish_many(["a", "b"], delay=60)
    while dq.purge("t", MessageState.pending):
        pass
    s = dq.batch_status("t", b.id).of("default")
    assert (s.removed, s.pending, s.unsent) == (2, 0, ("complete",))
    if not isinstance(dq, DelayQueue):
        return   # the blocking Worker needs the blocking client
    with running(Worker(dq, {"t": lambda m: None}, concurrency=1)):
        poll(lambda: dq.batch_status("t", b.id).of("default").unsent == (), timeout=5)
    assert [e for e, _, _ in callbacks(dq)] == ["complete"]


def test_a_forwarder_killed_before_it_cleared_the_outbox_publishes_nothing_twice(dq):
    """The outbox entry put back (as a forwarder killed between its publish and its ZREM leaves
    it): the next forward finds the callback's key held and publishes nothing."""
    with dq.batch("t", on_complete=("reports", "x")) as b:
        b.publish("a")
    drain(dq)
    pk = dq.keys("t", b.partition).p
    assert dq.redis.zcard(pk.batch_outbox) == 0
    [d] = dq.claim("reports")                     # forwarded once, and being handled
    dq.redis.zadd(pk.batch_outbox, {f"{b.id}|default|complete": 1})
    assert dq.forward_batch_callbacks("t") == 1
    dq.ack(d)
    dq.redis.zadd(pk.batch_outbox, {f"{b.id}|default|complete": 1})
    assert dq.forward_batch_callbacks("t") == 1   # done, but its key is kept (unique_for)
    assert callbacks(dq) == [] and dq.redis.zcard(pk.batch_outbox) == 0


@pytest.mark.single_group   # names its own groups
def test_counts_are_per_group_and_group_picks_whose_callbacks_fire(dq):
    dq.configure_topic("t")
    dq.configure_group("t", "billing")
    with dq.batch("t", on_complete=("reports", "each")) as each:
        each.publish("a")
    with dq.batch("t", on_complete=("reports", "billing only"), group="billing") as one:
        one.publish("b")
    drain(dq)                                     # the default group ends both
    assert [(e, i) for e, i, _ in callbacks(dq)] == [("complete", each.id)]
    assert dq.batch_status("t", one.id).of("billing").pending == 1
    for d in dq.claim("t", 10, group="billing"):
        dq.ack(d)
    got = callbacks(dq)
    assert sorted(p for _, _, p in got) == [b"billing only", b"each"]
    assert dq.batch_status("t", one.id).of("default").fired and dq.batch_status("t", one.id).group == "billing"


@pytest.mark.single_group   # over means over in every group
def test_a_seal_trims_batches_over_for_a_week_and_keeps_the_unfinished(dq):
    """Their records go (definition, counts, index entry); one still running is looked at again
    a week later, and its counting goes on."""
    with dq.batch("t", on_complete=("reports", "x"), partition=0) as over:
        over.publish("a")
    drain(dq)
    with dq.batch("t", on_complete=("reports", "y"), partition=0) as running:
        waiting = running.publish("b", delay=60)
    pk = dq.keys("t", 0).p
    dq.redis.zadd(pk.batch_index, {over.id: 1, running.id: 2})      # opened long ago
    with dq.batch("t", partition=0) as fresh:
        pass
    with pytest.raises(MessageNotFound):
        dq.batch_status("t", over.id)
    assert not [f for g in dq.groups("t") for f in dq.redis.hkeys(dq.keys("t", 0, g).g.batches)
                if f.startswith(over.id.encode())]
    assert dq.redis.zscore(pk.batch_index, running.id) > 2 and dq.redis.zscore(pk.batch_index, fresh.id)
    assert dq.batch_status("t", running.id).of("default").pending == 1
    assert [p for _, _, p in callbacks(dq)] == [b"x"]     # the first batch's, forwarded before it went
    dq.deliver_now("t", waiting)
    drain(dq)
    assert [p for _, _, p in callbacks(dq)] == [b"y"]


def test_bad_input_is_refused_with_a_clear_error_and_writes_nothing(dq):
    with pytest.raises(InvalidArgument, match="on_complete must be a"):
        dq.batch("t", on_complete="reports")
    with pytest.raises(InvalidArgument, match="celery"):
        dq.batch("t", on_dead=("celery.x", "y"))
    with pytest.raises(MessageNotFound):
        dq.batch_status("t", "01JNOSUCHBATCH")
    b = dq.batch("t", on_complete=("reports", "x"))
    with pytest.raises(StateConflict, match="open the batch first"):
        b.publish("a")
    with dq.batch("t") as b:
        parent = b.publish("p")
        with pytest.raises(InvalidArgument, match="after="):
            b.publish("c", after=parent)
    assert dq.batch_status("t", b.id).of("default").total == 1


def test_async_with_on_the_asyncio_client(engine_url):
    async def main():
        async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
            async with q.batch("t", on_success=("reports", "ok")) as b:
                await b.publish("a")
                await b.publish_many(["b", "c"])
            for d in await q.claim("t", 10):
                await q.ack(d)
            [cb] = await q.claim("reports", 10)
            status = await b.status()
            return cb.message.payload, cb.message.headers["delayq-batch"], b.id, status.of("default").acked
    payload, batch, bid, acked = run_async(main())
    assert (payload, batch, acked) == (b"ok", bid, 3)

    async def opened_without_async_with():
        async with AsyncDelayQueue.from_url(engine_url, actor="test") as q:
            with pytest.raises(InvalidArgument, match="async with"):
                q.batch("t").open()
    run_async(opened_without_async_with())


def test_redis_memory_per_batch_beyond_its_members(dq):
    """A batch costs a few hash fields whatever its size (measured for docs/design.md)."""
    with dq.batch("t", on_complete=("reports", {"campaign": 7})) as b:
        b.publish_many([str(i) for i in range(1000)])
    pk, gk = dq.keys("t", b.partition).p, dq.keys("t", b.partition).g
    assert dq.redis.hlen(pk.batch_of) == 1000
    assert len([f for f in dq.redis.hkeys(pk.batches) if f.startswith(b.id.encode())]) == 3
    assert len([f for f in dq.redis.hkeys(gk.batches) if f.startswith(b.id.encode())]) == 1
    for group in dq.groups("t"):
        for d in dq.claim("t", 1000, group=group):
            dq.ack(d)
    assert dq.redis.hlen(pk.batch_of) == 0            # freed with the payloads (the last group's ack)
    assert json.loads(dq.redis.hget(pk.batches, f"{b.id}|cb"))["complete"]["t"] == "reports"


@pytest.mark.slow
def test_each_callback_is_published_exactly_once_while_workers_are_killed(engine_url):
    """1,000 batches of two members, two worker processes, one SIGKILLed (and restarted) each time
    250 more deliveries were handled: every batch's complete and success callbacks are published
    once each (the worker's acks and heartbeats and this test all forward, concurrently)."""
    dq = DelayQueue.from_url(engine_url, actor="test")
    dq.configure_topic("jobs", visibility_timeout=1, retry=RetryPolicy.fixed(0, max_attempts=1000))
    batches = []
    for i in range(1000):
        with dq.batch("jobs", on_complete=("reports", f"done {i}"), on_success=("reports", f"ok {i}")) as b:
            b.publish_many([f"{i}-a", f"{i}-b"])
        batches.append(b.id)
    def ended():
        return sum(dq.batch_status("jobs", b).of("default").pending == 0 for b in batches[::50])

    with WorkerProcesses(engine_url, "jobs", "tests.queue_core.handlers:record", seed=11) as workers:
        while dq.redis.llen("test:handled") < 2000 or sum(dq.counts("jobs").values()) > 0:
            seen = dq.redis.llen("test:handled")
            poll(lambda seen=seen: dq.redis.llen("test:handled") >= seen + 250
                 or sum(dq.counts("jobs").values()) == 0, timeout=30)
            if workers.kills < 4:
                workers.kill_one()
    kills = workers.kills
    assert ended() == 20 and kills >= 3
    dq.forward_batch_callbacks("jobs", limit=2000)   # what a killed worker's ack left to forward
    published = []
    while got := dq.claim("reports", 1000):
        published += [(d.message.headers["delayq-batch"], d.message.headers["delayq-batch-event"]) for d in got]
        dq.ack_many(got)
    assert Counter(published) == Counter((b, e) for b in batches for e in ("complete", "success"))
    assert dq.redis.zcard(dq.keys("jobs").p.batch_outbox) == 0
    dq.redis.close()


def test_finding_callbacks_that_can_never_be_published_do_not_block_the_outbox(dq):
    """A callback its topic refuses for good moves to the batch's failed record (with an event)
    instead of staying at the outbox's front; an ack forwards the entries it fired, not the rest."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    bad = []
    for i in range(20):
        with dq.batch("t", on_dead=("tiny", "x" * 50), group="default", partition=0) as b:
            b.publish(i)
        bad.append(b.id)
    dq.configure_topic("tiny", max_payload_bytes=10)   # after the open's check: refused when it fires
    for d in dq.claim("t", 100):
        dq.nack(d, ValueError("boom"))
    pk = dq.keys("t", 0).p
    assert dq.redis.zcard(pk.batch_outbox) == 0
    s = dq.batch_status("t", bad[0]).of("default")
    assert s.unsent == () and "tiny refused it" in s.failed["dead"] and "fired" not in s.failed
    events = [f for _, f in dq.redis.xrange(dq.keys("t", 0).events) if f[b"e"] == b"callback_failed"]
    assert sorted(f[b"ids"].decode() for f in events) == sorted(bad)
    # An entry a killed forwarder left: the next ack that fires forwards its own callback only.
    dq.redis.zadd(pk.batch_outbox, {f"{bad[0]}|default|dead": 1})
    with dq.batch("t", on_complete=("reports", "ok"), group="default", partition=0) as good:
        good.publish("fine")
    drain(dq)
    assert callbacks(dq) == [("complete", good.id, b"ok")]
    assert dq.redis.zrange(pk.batch_outbox, 0, -1) == [f"{bad[0]}|default|dead".encode()]
    assert dq.forward_batch_callbacks("t", budget_s=0) == 0            # the keeper's time budget
    assert dq.redis.zcard(pk.batch_outbox) == 1
    assert dq.forward_batch_callbacks("t") == 0 and dq.redis.zcard(pk.batch_outbox) == 0
    assert "tiny refused it" in dq.batch_status("t", bad[0]).of("default").failed["dead"]


def test_finding_callback_payloads_are_checked_when_the_batch_opens(dq):
    with pytest.raises(PayloadTooLarge, match="at most 65,536"):
        dq.batch("t", on_dead=("alerts", b"x" * (CALLBACK_MAX_BYTES + 1)))
    with pytest.raises(PayloadNotSerializable):
        dq.batch("t", on_complete=("reports", object()))
    dq.configure_topic("tiny", max_payload_bytes=10)
    with pytest.raises(PayloadTooLarge, match="'tiny' takes at most 10"), dq.batch("t", on_dead=("tiny", "x" * 50)):
        pass
    assert not any(dq.redis.hlen(dq.keys("t", p).p.batches) for p in range(dq.layout("t").partitions))


def test_finding_members_join_only_an_open_batch_of_their_topic(dq):
    """publish.lua refuses a member of a sealed batch (complete would have fired early), of an
    invented id or of another topic's batch (counters nobody trims), and writes nothing."""
    with dq.batch("t", on_complete=("reports", "done"), partition=0) as b:
        b.publish("a")
    with pytest.raises(StateConflict, match="is sealed"):
        dq.publish("t", "late", batch=b.id)
    with dq.batch("other", partition=0) as theirs:
        pass
    invented = b.id[:-4] + "ZZZZ"
    for bid in (invented, theirs.id):
        with pytest.raises(MessageNotFound, match="has no batch"):
            dq.publish_many("t", ["x", "y"], batch=bid)
    gks = [dq.keys("t", 0, g).g for g in dq.groups("t")]
    assert not [f for gk in gks for f in dq.redis.hkeys(gk.batches) if not f.startswith(b.id.encode())]
    assert sum(dq.counts("t").values()) == 1 and dq.batch_status("t", b.id).of("default").total == 1
    drain(dq)
    assert callbacks(dq) == [("complete", b.id, b"done")]


def test_finding_replaying_a_dead_member_of_a_trimmed_batch_writes_no_orphan_counters(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    with dq.batch("t", group="default", partition=0) as b:
        b.publish("a")
    for d in dq.claim("t", 10):
        dq.nack(d, ValueError("boom"))
    pk = dq.keys("t", 0).p
    dq.redis.hdel(pk.batches, f"{b.id}|cb", f"{b.id}|c", f"{b.id}|s")     # trimmed (as batch_trim does)
    for g in dq.groups("t"):
        dq.redis.delete(dq.keys("t", 0, g).g.batches)
    assert dq.replay_dead("t") == 1
    drain(dq)
    assert not any(dq.redis.exists(dq.keys("t", 0, g).g.batches) for g in dq.groups("t"))


def test_finding_a_forged_dedup_key_cannot_suppress_a_callback(dq):
    """The forwarder's key is NUL-prefixed: a publisher who knows the batch id can neither hold
    it (publish refuses NUL in a key) nor suppress the callback with the key it used to be."""
    with dq.batch("t", on_complete=("reports", "real"), group="default", partition=0) as b:
        b.publish("a")
    dq.publish("reports", "forged", key=f"batch:{b.id}:default:complete", dedup="unique_for", window=3600)
    with pytest.raises(InvalidArgument, match="NUL"):
        dq.publish("reports", "forged", key=f"\0batch:{b.id}:default:complete")
    drain(dq)
    got = [d.message.payload for d in dq.claim("reports", 10)]
    assert sorted(got) == [b"forged", b"real"]


def test_finding_a_members_key_must_route_to_its_batchs_partition(dq):
    """A key published inside and outside a batch would land in two partitions (dedup and per-key
    order broken): a member whose key routes elsewhere is refused, saying why; one that routes to
    the batch's partition is published, and deduplicated as outside it."""
    probes = {f"k{i}": dq.publish("t", "probe", key=f"k{i}") for i in range(30)}   # where each key routes
    home = [k for k, pid in probes.items() if partition_of(pid) == 0]
    away = [k for k, pid in probes.items() if partition_of(pid) != 0]
    assert home and (away or dq.layout("t").partitions == 1)
    with dq.batch("t", partition=0) as b:
        assert b.publish("a", key=home[0]) == probes[home[0]]   # one key, one message: joins nothing
        b.publish("c", order_key=home[1])
        for kwargs in [{"key": k} for k in away[:1]] + [{"order_key": k} for k in away[:1]]:
            with pytest.raises(InvalidArgument, match="open the batch with partition="):
                b.publish("x", **kwargs)
        if away:
            with pytest.raises(InvalidArgument, match="order_key="):
                b.publish_many(["x", "y"], order_key=away[0])
    assert dq.batch_status("t", b.id).of("default").total == 1


def test_finding_an_unknown_group_is_refused_when_the_batch_opens(dq):
    dq.publish("t", "x")
    with pytest.raises(InvalidArgument, match="has no consumer group 'nope'"), dq.batch("t", group="nope"):
        pass
    assert not any(dq.redis.hlen(dq.keys("t", p).p.batches) for p in range(dq.layout("t").partitions))


def test_finding_an_ack_pays_one_hlen_of_batch_of(dq):
    """The docs' cost: an ack call asks HLEN of batch_of once (its batch_end and leave's
    batch_forget share the answer), with or without a batch member in the partition."""
    for with_batch in (False, True):
        if with_batch:
            with dq.batch("t", partition=0) as b:
                b.publish("member")
        else:
            dq.publish("t", "plain", partition=0)
        [d] = dq.claim("t", 1)
        with dq.redis.monitor() as m:
            dq.ack(d)
            dq.redis.echo("end of the ack")
            seen = []
            for entry in m.listen():
                if entry["command"] == "ECHO end of the ack":
                    break
                seen.append(entry["command"])
        assert len([c for c in seen if c.startswith("HLEN") and "batch_of" in c]) == 1, seen


def test_finding_an_unsealed_batch_whose_members_ended_is_trimmed_after_a_week(dq):
    with pytest.raises(RuntimeError), dq.batch("t", partition=0) as idle:
        idle.publish("a")
        raise RuntimeError("never sealed")
    with pytest.raises(RuntimeError), dq.batch("t", partition=0) as busy:
        busy.publish("b", delay=3600)
        raise RuntimeError("never sealed, a member still pending")
    for g in dq.groups("t"):
        for d in dq.claim("t", 10, group=g):
            dq.ack(d)
    pk = dq.keys("t", 0).p
    dq.redis.zadd(pk.batch_index, {idle.id: 1, busy.id: 2})      # opened long ago
    with dq.batch("t", partition=0):
        pass                                                      # a seal trims
    with pytest.raises(MessageNotFound):
        dq.batch_status("t", idle.id)
    assert dq.batch_status("t", busy.id).of("default").pending == 1


def test_finding_a_batch_says_when_a_member_last_ended(dq):
    """Console finding 7: each group keeps when its last member ended, so a stalled batch can be
    told from a slow one; it is kept per group and moves only when a member ends."""
    with dq.batch("t", **CALLBACKS) as b:
        b.publish_many(["a", "b", "c"])
    status = dq.batch_status("t", b.id)
    assert all(g.last_end_ms is None for g in status.groups.values())
    d = dq.claim("t", 1)[0]
    dq.ack(d)
    ended = dq.batch_status("t", b.id).of("default").last_end_ms
    assert ended is not None and status.created_ms <= ended <= dq.server_ms()
    others = [g for name, g in dq.batch_status("t", b.id).groups.items() if name != "default"]
    assert all(g.last_end_ms is None for g in others)           # another group's members have not ended
    dq.claim("t", 1)                                              # claimed, not ended: the time stays
    assert dq.batch_status("t", b.id).of("default").last_end_ms == ended
