"""undo in ordered groups (lua/undo.lua, lua/includes/hold.lua): what comes back goes to its place
in its ordering key's line, the key's first message holding the key again. The hold path records
the place of a key's active message (active["\\1<key>"] = "<id>|<sequence>", valid only while
<id> is the key's active message); publish, claim and ack never touch it."""

import pytest

from queue_core import MessageState

from .helpers import poll


def ordered(dq):
    dq.configure_group("t", "default", ordered=True)


def recorded_place(dq, okey):
    """The key's recorded place (the active hash's "\\1<key>" field) in whichever partition has it."""
    values = [dq.redis.hget(dq.keys("t", p).g.active, "\x01" + okey) for p in range(dq.layout("t").partitions)]
    found = [v.decode() for v in values if v is not None]
    assert len(found) <= 1
    return found[0] if found else None


def active_fields(dq):
    return sum(dq.redis.hlen(dq.keys("t", p).g.active) for p in range(dq.layout("t").partitions))


def drain_in_order(dq, n):
    """The payloads a consumer claiming one at a time gets, until n have come."""
    got = []

    def step():
        for d in dq.claim("t", 1):
            got.append(d.message.payload.decode())
            dq.ack(d)
        return len(got) == n
    poll(step, timeout=10)
    return got


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


def test_finding_undo_keeps_each_ordering_keys_publish_order(dq):
    """12 messages of each key, all purged (the active one and those held behind it, some promoted
    while the purge removed their predecessors), put back in small calls (HSCAN order, not publish
    order): a consumer claiming one at a time gets each key's messages in publish order."""
    dq.configure_group("t", "default", ordered=True)
    ids = {k: [dq.publish("t", f"{k}{n}", order_key=k, delay=0.2) for n in range(12)] for k in "AB"}
    assert dq.purge("t", "pending", hold="o", batch=5) == 24
    assert dq.undo("t", "o", batch=3).restored == 24
    got = {"A": [], "B": []}

    def drain():
        for d in dq.claim("t", 1):
            got[d.message.payload.decode()[0]].append(str(d.message.id))
            dq.ack(d)
        return len(got["A"]) + len(got["B"]) == 24
    poll(drain, timeout=10)
    assert got == {k: [str(i) for i in v] for k, v in ids.items()}


def test_finding_undo_gives_a_key_back_to_its_first_message_not_the_earliest_due(dq):
    """The key's owner is due in 10 min, the one behind it in 0.2 s: both purged (the second was
    promoted when the first went), then undone, the owner holds the key again."""
    dq.configure_group("t", "default", ordered=True)
    first = dq.publish("t", "first", order_key="A", delay=600)
    second = dq.publish("t", "second", order_key="A", delay=0.2)
    assert dq.purge("t", "pending", hold="o") == 2
    assert dq.undo("t", "o").restored == 2
    assert dq.get("t", second).held_by == first and dq.get("t", first).held_by is None


@pytest.mark.parametrize("holds,batch", [(("e1", "e2"), 100), (("e", "e"), 100), (("e", "e"), 2)],
                         ids=["two-holds", "one-hold-one-call", "one-hold-batches-of-2"])
def test_finding_undo_puts_a_keys_owner_back_before_its_followers(dq, holds, batch):
    """0 is the key's active (ready) message, 1-5 held behind it. The held ones are purged first, then
    0: none of its key's messages was waiting then, yet undo gives the key back to 0, not to 1."""
    ordered(dq)
    for n in range(6):
        dq.publish("t", str(n), order_key="A")
    assert dq.purge("t", "pending", hold=holds[0]) == 5
    assert dq.purge("t", "ready", hold=holds[1]) == 1
    for hold in dict.fromkeys(holds):   # e1 then e2 (the held ones first)
        assert dq.undo("t", hold, batch=batch).restored == (6 if len(set(holds)) == 1 else 5 if hold == "e1" else 1)
    assert drain_in_order(dq, 6) == ["0", "1", "2", "3", "4", "5"]


def test_finding_undo_takes_the_key_back_from_a_follower_the_removal_promoted(dq):
    """Removing 1 (held) and 0 (active) in one call passes the key to 2, which stays ready and
    unclaimed: undo puts 0 and 1 back and 2 waits again in its place."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(6)]
    assert dq.remove("t", [ids[1], ids[0]], event="cancelled", states=[MessageState.pending, MessageState.ready],
                     hold="f") == [0, 0]
    assert dq.get("t", ids[2]).state == MessageState.ready   # the removal passed the key on
    assert dq.undo("t", "f").restored == 2
    assert dq.get("t", ids[2]).held_by == ids[0]
    assert drain_in_order(dq, 6) == ["0", "1", "2", "3", "4", "5"]


def test_undo_takes_the_key_back_from_each_follower_promoted_in_turn(dq):
    """remove(0, 1) in that order: 0's removal promotes 1, whose place (its own sequence) goes with
    the key, then 1's promotes 2. Undo gives the key back to 0 and puts 1 before 2."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(4)]
    assert dq.remove("t", ids[:2], event="cancelled", states=[MessageState.ready], hold="r") == [0, 0]
    assert recorded_place(dq, "A").startswith(ids[2] + "|")
    assert dq.undo("t", "r").restored == 2
    assert dq.get("t", ids[1]).held_by == ids[0] and dq.get("t", ids[2]).held_by == ids[0]
    assert drain_in_order(dq, 4) == ["0", "1", "2", "3"]


@pytest.mark.parametrize("calls", [[[1], [4], [2]], [[2], [1], [3]], [[4], [2, 5], [1]], [[3, 5], [1, 2]]],
                         ids=["front-first", "second-then-first", "back-first", "two-calls"])
def test_the_owners_place_stays_before_every_follower_removed_in_any_order(dq, calls):
    """0 active, 1-6 held under sequences 1-6 (the group's first held ones); followers removed in
    several calls and orders: 0's recorded place is one before the first that waited at each
    removal, the lowest kept (a later removal, with only later ones waiting, never raises it)."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(7)]
    waiting, floor = set(range(1, 7)), 7
    for call in calls:
        for n in call:   # each removal in the call sees what still waits then
            floor = min(floor, min(waiting))
            waiting.discard(n)
        dq.remove("t", [ids[n] for n in call], event="cancelled", states=[MessageState.pending], hold="h")
        assert recorded_place(dq, "A") == f"{ids[0]}|{floor - 1}"
    dq.remove("t", [ids[0], *(ids[n] for n in sorted(waiting))], event="cancelled",
              states=[MessageState.pending, MessageState.ready], hold="h")
    assert active_fields(dq) == 0                     # the line emptied: the key and its place went
    assert dq.undo("t", "h", batch=2).restored == 7
    assert drain_in_order(dq, 7) == [str(n) for n in range(7)]


def test_a_stale_place_is_ignored_after_an_ack_moved_the_line_on(dq):
    """0's removal recorded 1's place with the key; a normal ack of 1 then promoted 2 (the record
    names 1: stale). Undo puts 0 back behind 2, which keeps the key: the line moved on."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(5)]
    assert dq.remove("t", [ids[0]], event="cancelled", states=[MessageState.ready], hold="s") == [0]
    [d] = dq.claim("t", 5)
    assert d.message.id == ids[1]
    dq.ack(d)
    assert dq.get("t", ids[2]).state is MessageState.ready
    assert recorded_place(dq, "A").startswith(ids[1] + "|")   # stale: 2 holds the key now
    assert dq.undo("t", "s").restored == 1
    assert dq.get("t", ids[2]).state is MessageState.ready and dq.get("t", ids[0]).held_by == ids[2]
    assert drain_in_order(dq, 4) == ["2", "0", "3", "4"]


def test_a_follower_claimed_before_the_undo_keeps_the_key(dq):
    """The removal passed the key to 1 and a worker claimed it: undo cannot take it back, so 0
    waits behind it and comes next."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(3)]
    dq.remove("t", [ids[0]], event="cancelled", states=[MessageState.ready], hold="c")
    [d] = dq.claim("t", 5)
    assert d.message.id == ids[1]
    assert dq.undo("t", "c").restored == 1
    assert dq.get("t", ids[0]).held_by == ids[1]
    dq.ack(d)
    assert drain_in_order(dq, 2) == ["0", "2"]


def test_a_message_that_took_the_free_key_after_the_removal_keeps_it(dq):
    """All of key A held for undo (followers first, recording 0's place), the key free; a new
    message takes it by its publish, without a recorded place: undo puts 0-3 back behind it."""
    ordered(dq)
    for n in range(4):
        dq.publish("t", str(n), order_key="A")
    assert dq.purge("t", "pending", hold="k") == 3
    assert recorded_place(dq, "A") is not None
    assert dq.purge("t", "ready", hold="k") == 1
    assert active_fields(dq) == 0
    new = dq.publish("t", "new", order_key="A")
    assert dq.undo("t", "k", batch=2).restored == 4
    assert dq.get("t", new).state is MessageState.ready and dq.get("t", new).held_by is None
    assert drain_in_order(dq, 5) == ["new", "0", "1", "2", "3"]


def test_the_recorded_place_goes_when_the_line_empties(dq):
    """A place recorded by a hold stays while the key's line has messages; the ack that empties the
    line drops it with the key (the same HDEL)."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(3)]
    dq.publish("t", "other", order_key="B")
    dq.remove("t", [ids[2]], event="cancelled", states=[MessageState.pending], hold="p")
    assert recorded_place(dq, "A") == f"{ids[0]}|0"
    assert sorted(drain_in_order(dq, 3)) == ["0", "1", "other"]
    assert recorded_place(dq, "A") is None and active_fields(dq) == 0
