"""Why a delivery was late (lua/includes/lateness.lua): each cause produced for real, read back
through ``get`` (``lateness_cause``), the claimed event's ``cause`` column and the per-minute
counts of ``lateness_causes``."""

import pytest

from queue_core import InvalidArgument, RetryPolicy
from queue_core.keys import LATENESS_CAUSES

from .helpers import events, poll, server_ms

LATE_MS = 40   # well past the 10 ms under which a delivery has no cause


def wait_past(dq, due_ms, late_ms=LATE_MS):
    """Until Redis's clock is ``late_ms`` past ``due_ms`` (a poll with a deadline, not a guess)."""
    poll(lambda: server_ms(dq) >= due_ms + late_ms)


def published_due(dq, topic="t", payload="x", **kw):
    """A message published now, and its due time (ms) as the engine stored it."""
    mid = dq.publish(topic, payload, **kw)
    return mid, int(dq.get(topic, mid).due_at.timestamp() * 1000)


def claimed_cause(dq, msg_id, topic="t"):
    m = dq.get(topic, msg_id)
    assert m.state == "unacked"
    return m.lateness_cause


def holder_notes(dq, topic="t"):
    """Every partition's late_holders hash (id -> holder), merged."""
    out = {}
    for p in range(dq.layout(topic).partitions):
        out.update(dq.redis.hgetall(dq.keys(topic, p).late_holders))
    return out


def released_late_behind(dq, topic="t"):
    """An ordered group whose second message was released late by its key's first: (first, second)."""
    dq.configure_group(topic, "default", ordered=True)
    first = dq.publish(topic, "1", order_key="k")
    second = dq.publish(topic, "2", order_key="k")
    [d] = dq.claim(topic, 2)
    wait_past(dq, d.due_ms)
    dq.ack(d)
    [(note_id, note)] = holder_notes(dq, topic).items()
    held_until, holder = note.decode().split("|")
    assert (note_id.decode(), holder) == (second, first)
    assert int(held_until) > int(dq.get(topic, second).due_at.timestamp() * 1000)
    return first, second


def minute_total(dq, cause, topic="t"):
    return sum(dq.lateness_causes(topic, minutes=2)["causes"][cause])


def test_on_time_delivery_has_no_cause(dq):
    """A message claimed as soon as it is due has no cause, and nothing is counted."""
    assert dq.claim("t", 1) == []   # the scripts loaded: the claim below is one round trip
    mid = dq.publish("t", "x")
    [d] = dq.claim("t", 1)
    assert d.id == mid
    assert d.claimed_ms - d.due_ms <= 10, d.claimed_ms - d.due_ms
    assert claimed_cause(dq, mid) is None
    assert all(sum(v) == 0 for v in dq.lateness_causes("t", minutes=2)["causes"].values())
    [row] = [e for e in events(dq, "t") if e["event"] == "claimed"]
    assert not row.get("lateness_cause")


def test_no_worker_when_nobody_claimed_since_due(dq):
    """Nobody asked to claim between the due time and the (late) claim: no_worker."""
    mid, t0 = published_due(dq)
    wait_past(dq, t0)
    [d] = dq.claim("t", 1)
    assert d.claimed_ms - d.due_ms > 10
    assert claimed_cause(dq, mid) == "no_worker"
    assert minute_total(dq, "no_worker") == 1
    [row] = [e for e in events(dq, "t") if e["event"] == "claimed"]
    assert row["lateness_cause"] == "no_worker"


def test_paused_group(dq):
    """Paused after the message was due and resumed before the claim: paused."""
    dq.pause("t")
    mid, t0 = published_due(dq)
    assert dq.claim("t", 1) == []   # a worker asks, the pause refuses
    wait_past(dq, t0)
    dq.resume("t")
    dq.claim("t", 1)
    assert claimed_cause(dq, mid) == "paused"
    assert minute_total(dq, "paused") == 1


def test_key_held_names_the_holder(dq):
    """A message held behind its ordering key's active message past its due time names the holder."""
    dq.configure_group("t", "default", ordered=True)
    first = dq.publish("t", "1", order_key="k")
    second = dq.publish("t", "2", order_key="k")
    [d] = dq.claim("t", 2)
    assert d.id == first
    wait_past(dq, d.due_ms)
    dq.ack(d)
    [d2] = dq.claim("t", 2)
    assert d2.id == second
    m = dq.get("t", second)
    assert (m.lateness_cause, m.late_behind) == ("key_held", first)
    assert minute_total(dq, "key_held") == 1
    row = [e for e in events(dq, "t") if e["event"] == "claimed" and e["msg"] == second][0]
    assert (row["lateness_cause"], row["late_behind"]) == ("key_held", first)
    # The note is taken by the claim: nothing is left behind.
    assert not holder_notes(dq)


@pytest.mark.single_partition   # limits are split over partitions
def test_rate_limit(dq):
    """A group rate limit held a due message: rate_limited."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", rate=(10, 1.0))   # a burst of 1, then one per 100 ms
    first, t0 = published_due(dq, payload="1")
    second = dq.publish("t", "2")
    assert [d.id for d in dq.claim("t", 2)] == [first]
    got = poll(lambda: dq.claim("t", 2))
    assert [d.id for d in got] == [second]
    assert claimed_cause(dq, second) == "rate_limited"
    # Claimed at its first ask: the limit held the other, not this one.
    assert claimed_cause(dq, first) != "rate_limited"


@pytest.mark.single_partition   # limits are split over partitions
def test_concurrency_limit(dq):
    """max_in_flight held a due message until an ack: concurrency_limited."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", max_in_flight=1)
    first = dq.publish("t", "1")
    second, t0 = published_due(dq, payload="2")
    [d] = dq.claim("t", 2)
    assert d.id == first
    assert dq.claim("t", 2) == []   # the limit refuses while the first is in flight
    wait_past(dq, t0)
    dq.ack(d)
    [d2] = dq.claim("t", 2)
    assert d2.id == second
    assert claimed_cause(dq, second) == "concurrency_limited"


@pytest.mark.single_partition   # claims are per partition: a claim elsewhere is not this one's
def test_saturated_worker(dq):
    """A worker claimed after the message was due but took others first (it asks for one at a
    time): saturated."""
    first = dq.publish("t", "1")
    second, t0 = published_due(dq, payload="2")
    [d] = dq.claim("t", 1)
    assert d.id == first
    wait_past(dq, t0)
    [d2] = dq.claim("t", 1)
    assert d2.id == second
    assert claimed_cause(dq, second) == "saturated"


def test_saturated_when_messages_are_in_flight(dq):
    """No claim since the message was due, but the group's workers had messages in flight: the
    workers were busy, not absent."""
    dq.publish("t", "busy")
    [busy] = dq.claim("t", 1)
    late, t0 = published_due(dq, payload="late")
    wait_past(dq, t0)
    got = poll(lambda: dq.claim("t", 1))
    assert got[0].id == late
    assert busy.id != late
    # In a multi-partition topic the busy message may sit in another partition: then nothing of
    # this one's group was in flight, and no worker claimed here since the due time.
    assert claimed_cause(dq, late) in ("saturated" if dq.layout("t").partitions == 1 else ("saturated", "no_worker"))


def test_retry_claimed_on_time_is_retry_backoff(dq):
    """A retry claimed when its backoff ends is late against its first due time by the backoff."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=3))
    mid = dq.publish("t", "x")
    [d] = dq.claim("t", 1)
    dq.nack(d, "boom")
    [d2] = poll(lambda: dq.claim("t", 1))
    assert d2.attempt == 2
    assert claimed_cause(dq, mid) == "retry_backoff"
    assert minute_total(dq, "retry_backoff") == 1


def test_cause_is_of_the_delivery_in_progress(dq):
    """The cause lives with the lease: once acked the message is gone, and a released message
    (back to ready) has none until it is claimed again."""
    mid, t0 = published_due(dq)
    wait_past(dq, t0)
    [d] = dq.claim("t", 1)
    assert claimed_cause(dq, mid) == "no_worker"
    dq.release([d])
    m = dq.get("t", mid)
    assert m.state == "ready" and m.lateness_cause is None


def test_lateness_causes_shape_and_bad_input(dq):
    """Every cause is a key, one count per minute, oldest first; minutes outside 1..60 refused."""
    out = dq.lateness_causes("t", minutes=5)
    assert set(out["causes"]) == set(LATENESS_CAUSES)
    assert len(out["minutes"]) == 5 and out["minutes"] == sorted(out["minutes"])
    assert all(v == [0] * 5 for v in out["causes"].values())
    with pytest.raises(InvalidArgument, match="between 1 and 60"):
        dq.lateness_causes("t", minutes=61)


def test_finding_holder_note_dropped_when_message_leaves(dq):
    """A late-released message cancelled before its claim leaves no note behind (leave.lua)."""
    _, second = released_late_behind(dq)
    dq.cancel("t", second)
    assert dq.get("t", second) is None or dq.get("t", second).state != "ready"
    assert not holder_notes(dq)


def test_finding_holder_note_dropped_by_claim_in_unordered_group(dq):
    """A note whose group was unordered before the claim is dropped by it, and names no holder."""
    _, second = released_late_behind(dq)
    dq.configure_group("t", "default", ordered=False)
    [d] = dq.claim("t", 1)
    assert d.id == second
    assert claimed_cause(dq, second) != "key_held"
    assert not holder_notes(dq)


def test_finding_resume_of_running_group_is_not_paused(dq):
    """resume() of a group that was not paused labels nothing "paused"."""
    mid, t0 = published_due(dq)
    wait_past(dq, t0)
    dq.resume("t")
    dq.claim("t", 1)
    assert claimed_cause(dq, mid) == "no_worker"
    assert all(dq.redis.hget(dq.keys("t", p).config, "resumed_at") is None
               for p in range(dq.layout("t").partitions))


def test_finding_configure_group_keeps_resumed_at(dq):
    """configure_group after a resume keeps resumed_at: the paused backlog is still "paused"."""
    dq.pause("t")
    mid, t0 = published_due(dq)
    wait_past(dq, t0)
    dq.resume("t")
    dq.configure_group("t", "default", visibility_timeout=60)
    dq.claim("t", 1)
    assert claimed_cause(dq, mid) == "paused"


def test_finding_configure_group_unpausing_writes_resumed_at(dq):
    """configure_group(paused=False) on a paused group is a resume: its backlog is "paused"."""
    dq.configure_group("t", "default", paused=True)
    mid, t0 = published_due(dq)
    wait_past(dq, t0)
    dq.configure_group("t", "default", paused=False)
    dq.claim("t", 1)
    assert claimed_cause(dq, mid) == "paused"


def test_finding_late_retry_takes_first_attempt_causes(dq):
    """A retry claimed well after its backoff ended is no_worker (nobody asked), not retry_backoff."""
    dq.configure_topic("t", retry=RetryPolicy.fixed(0.2, max_attempts=3))
    mid = dq.publish("t", "x")
    [d] = dq.claim("t", 1)
    dq.nack(d, "boom")
    due = int(dq.get("t", mid).due_at.timestamp() * 1000)
    wait_past(dq, due, 1200)   # past claim_at's 1 s grain too
    [d2] = dq.claim("t", 1)
    assert d2.attempt == 2
    assert claimed_cause(dq, mid) == "no_worker"
    assert minute_total(dq, "retry_backoff") == 0


def test_finding_empty_poll_does_not_write(dq):
    """An empty claim less than a second after the last recorded one writes nothing."""
    stats = [dq.keys("t", p).stats for p in range(dq.layout("t").partitions)]
    assert dq.claim("t", 1) == []
    before = [dq.redis.hget(k, "claim_at") for k in stats]
    assert all(before)
    assert dq.claim("t", 1) == []
    if server_ms(dq) - max(int(b) for b in before) < 900:
        assert [dq.redis.hget(k, "claim_at") for k in stats] == before
    poll(lambda: server_ms(dq) >= max(int(b) for b in before) + 1000)
    assert dq.claim("t", 1) == []
    assert all(int(dq.redis.hget(k, "claim_at")) > int(b) for k, b in zip(stats, before, strict=True))


@pytest.mark.single_partition   # limits are split over partitions
def test_finding_key_limit_blames_only_its_key(dq):
    """Key A held by its own in-flight limit is no cause for key C's lateness, only for A's."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", fairness="round_robin", max_in_flight_per_key=1)
    a1 = dq.publish("t", "a", fairness_key="A")
    a2 = dq.publish("t", "a", fairness_key="A")
    [d] = dq.claim("t", 1)
    assert d.id == a1
    dq.publish("t", "b", fairness_key="B")
    c1, t0 = published_due(dq, payload="c", fairness_key="C")
    wait_past(dq, t0)
    # Keys in turn A (held: a1 in flight), B (takes its message), then the count is spent: C waits.
    [b] = dq.claim("t", 1)
    assert b.id not in (a2, c1)
    [c] = dq.claim("t", 1)
    assert c.id == c1
    assert claimed_cause(dq, c1) == "saturated"
    dq.ack(d)
    [a] = dq.claim("t", 1)
    assert a.id == a2
    assert claimed_cause(dq, a2) == "concurrency_limited"


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
@pytest.mark.parametrize("priority", [0, 9], ids=["due-order", "later-first"])
def test_one_claim_tells_each_message_its_own_cause(dq, priority, busy):
    """One claim takes a message late because of a pause and one due after the resume: each gets
    its own cause, whichever the claim takes first (a priority-9 message is claimed before an
    earlier-due one). The claim decides the cause of most of a backlog inline, from a floor set on
    its first late message (lateness.lua's .floor); an earlier-due message after it must not take
    that shortcut. Busy (a delivery in flight), the later one's cause is saturated; idle, no_worker."""
    if busy:
        dq.publish("t", "in flight")
        [in_flight] = dq.claim("t", 1)
    dq.pause("t")
    paused, t0 = published_due(dq)
    assert dq.claim("t", 1) == []   # a worker asks, the pause refuses
    wait_past(dq, t0)
    dq.resume("t")
    later, t1 = published_due(dq, priority=priority)
    wait_past(dq, t1)
    claimed = [d.id for d in dq.claim("t", 2)]
    assert sorted(claimed) == sorted([paused, later])
    if priority and dq.layout("t").partitions == 1:
        assert claimed == [later, paused]
    assert claimed_cause(dq, paused) == "paused"
    # Busy is per partition: with several, the one in flight may be in another (as above).
    expected = ("saturated",) if busy and dq.layout("t").partitions == 1 else \
        ("saturated", "no_worker") if busy else ("no_worker",)
    assert claimed_cause(dq, later) in expected
    if busy:
        assert dq.get("t", in_flight.id).lateness_cause is None
