"""dispatch_state and held_reason (engine/dispatch.py), the reads behind the dashboard's topic and
message pages: what a per-key in-flight limit holds back, counted as the claim counts it."""

import pytest

pytestmark = pytest.mark.single_partition   # the counts of one partition's keys, exactly


def test_acked_messages_no_longer_count_as_a_keys_in_flight(dq):
    """fkinf keeps an acked id until the key's next claim: the reads check each id against
    unacked, as the claim does, so an ack frees the key's slot in what the pages say at once."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", max_in_flight_per_key=1)
    ids = [dq.publish("t", str(i), fairness_key="acme") for i in range(3)]
    (first,) = dq.claim("t", 3)
    state = dq.dispatch_state("t")
    assert (state.held_back, state.reasons, state.keys) == (2, {"key_in_flight": 2}, [("acme", 2)])
    waiting = [i for i in ids if i != first.id]
    assert dq.held_reason("t", waiting[0]) == "waiting: key acme has 1 in flight (its limit is 1)"
    dq.ack(first)
    state = dq.dispatch_state("t")
    assert (state.held_back, state.reasons, state.in_flight) == (0, {}, 0)
    assert dq.held_reason("t", waiting[0]) is None
    assert len(dq.claim("t", 3)) == 1            # and the claim agrees: one more for the key


def test_a_claimed_id_counts_under_its_keys_slot_as_the_pages_compute_it(dq):
    """The claim files a claimed id in fkinf under its fairness key's slot (dispatch.lua), the
    number engine/dispatch.py's key_slot reads it by; the ack takes it out without the key."""
    from queue_core.engine.dispatch import key_slot
    dq.configure_topic("t")
    dq.configure_group("t", "default", max_in_flight_per_key=5)
    key_of = {dq.publish("t", "m", fairness_key=key): key for key in ("acme", "ünïcode key", "x" * 256)}
    claimed = dq.claim("t", 3)
    k = dq.keys("t", 0, "default")
    slots = {key_of[d.id]: dq.redis.zscore(k.fkinf, d.id) for d in claimed}
    assert slots == {key: key_slot(key) for key in ("acme", "ünïcode key", "x" * 256)}
    dq.ack_many(claimed)
    assert dq.redis.zcard(k.fkinf) == 0


def test_finding_dispatch_state_undercounts_a_key_while_the_fill_is_under_way(dq):
    """Per-key limits start the index for a solo key 2,000 messages at a time (then 1,000 a claim);
    the rest stay unlisted under fsolo. Once a ring exists dispatch_state counts listed entries only."""
    dq.configure_topic("t")
    dq.configure_group("t", "default", key_rate=(1, 10.0))
    dq.publish_many("t", [f"k{i}" for i in range(5000)], fairness_key="K")
    assert dq.dispatch_state("t").keys == [("K", 5000)]   # solo: right
    assert len(dq.claim("t", 10)) == 1                     # 1 per 10 s
    s = dq.dispatch_state("t")
    assert s.ready == 4999
    assert s.keys == [("K", 4999)], s.keys                 # found: [('K', 1999)]
    assert s.held_back == 4999, s.held_back                # found: 1999
