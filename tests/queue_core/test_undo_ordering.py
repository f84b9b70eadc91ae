"""undo in ordered groups (lua/undo.lua, lua/includes/hold.lua): what comes back goes to its place
in its ordering key's line, the key's first message holding the key again. The place of a key's
active message is recorded in active["\\1<key>"] = "<id>|<sequence>" (valid only while <id> is
the key's active message): by the hold path, and by promote_key in the HSET that passes the key.
Sequences start at SEQ_BASE (keys.py)."""

import pytest

from queue_core import MessageState
from queue_core.keys import SEQ_BASE

from .helpers import poll


def ordered(dq, **options):
    dq.configure_group("t", "default", ordered=True, **options)


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


def deliver_key_holders_now(dq, ids):
    """Each key's active message that waits for its due time is due now (the order is the point)."""
    for i in ids:
        m = dq.get("t", i)
        if m is not None and m.state is MessageState.pending and m.held_by is None:
            dq.deliver_now("t", i)


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
    # due in 60 s: all stay pending until the purge, however slow the machine (0.2 s raced it)
    ids = {k: [dq.publish("t", f"{k}{n}", order_key=k, delay=60) for n in range(12)] for k in "AB"}
    assert dq.purge("t", "pending", hold="o", batch=5) == 24
    assert dq.undo("t", "o", batch=3).restored == 24
    got = {"A": [], "B": []}

    def drain():
        for d in dq.claim("t", 1):
            got[d.message.payload.decode()[0]].append(str(d.message.id))
            dq.ack(d)
        deliver_key_holders_now(dq, [i for v in ids.values() for i in v])
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
        assert recorded_place(dq, "A") == f"{ids[0]}|{SEQ_BASE + floor - 1}"
    dq.remove("t", [ids[0], *(ids[n] for n in sorted(waiting))], event="cancelled",
              states=[MessageState.pending, MessageState.ready], hold="h")
    assert active_fields(dq) == 0                     # the line emptied: the key and its place went
    assert dq.undo("t", "h", batch=2).restored == 7
    assert drain_in_order(dq, 7) == [str(n) for n in range(7)]


def test_an_ack_records_the_place_of_the_message_it_promotes(dq):
    """0's removal promoted 1; a normal ack of 1 then promoted 2, and promote_key recorded 2's place
    (its sequence) with the key. 2 is not claimed yet: undo puts 0 back first, 2 in its place."""
    ordered(dq)
    ids = [dq.publish("t", str(n), order_key="A") for n in range(5)]
    assert dq.remove("t", [ids[0]], event="cancelled", states=[MessageState.ready], hold="s") == [0]
    [d] = dq.claim("t", 5)
    assert d.message.id == ids[1]
    dq.ack(d)
    assert dq.get("t", ids[2]).state is MessageState.ready
    assert recorded_place(dq, "A") == f"{ids[2]}|{SEQ_BASE + 2:015d}"
    assert dq.undo("t", "s").restored == 1
    assert dq.get("t", ids[2]).held_by == ids[0] and dq.get("t", ids[0]).held_by is None
    assert drain_in_order(dq, 4) == ["0", "2", "3", "4"]


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
    assert recorded_place(dq, "A") == f"{ids[0]}|{SEQ_BASE}"
    assert sorted(drain_in_order(dq, 3)) == ["0", "1", "other"]
    assert recorded_place(dq, "A") is None and active_fields(dq) == 0


def key_partition(dq, okey):
    """The group keys of the partition whose active hash holds `okey`."""
    for p in range(dq.layout("t").partitions):
        g = dq.keys("t", p).g
        if dq.redis.hexists(g.active, okey):
            return g
    raise AssertionError(f"no partition holds key {okey}")


def waiting_ids(dq, g):
    """The ids in `waiting` of group keys g, in line order: members "<key>\\0<place>\\0<id>\\0<due>",
    or "<key>\\0<place>\\0<due>\\0<id>" as written before the id followed the place (a due time
    has 15 digits, an id 26 characters)."""
    parts = [w.split(b"\0")[2:] for w in dq.redis.zrange(g.waiting, 0, -1)]
    return [(b if len(a) == 15 and a.isdigit() else a).decode() for a, b in parts]


def test_finding_nested_undos_never_give_a_place_below_zero(dq):
    """The group's first message takes the free key (no sequence handed out yet) and is removed:
    its place is a fresh sequence, the group's first (it was the last one, 0, before tied places
    were fixed). Each further level (undo, then remove the key's active one while the other waits)
    gives "one before the first waiting": below 0 before SEQ_BASE, which broke promote_key's
    pattern mid-undo (a message lost, the key wedged)."""
    ordered(dq)
    x = dq.publish("t", "x", order_key="k")
    dq.remove("t", [x], event="deleted", states=[MessageState.ready], hold="op1")
    a = dq.publish("t", "a", order_key="k")                  # takes the free key
    assert dq.undo("t", "op1").restored == 1                 # x waits behind a
    assert dq.get("t", x).held_by == a
    dq.remove("t", [a], event="deleted", states=[MessageState.ready], hold="op2")   # x promoted
    assert dq.undo("t", "op2").restored == 1                 # a at one before x's place
    assert recorded_place(dq, "k") == f"{a}|{SEQ_BASE:015d}"
    dq.remove("t", [a], event="deleted", states=[MessageState.ready], hold="op3")   # one level down
    assert dq.undo("t", "op3").restored == 1
    assert recorded_place(dq, "k") == f"{a}|{SEQ_BASE:015d}"
    assert dq.get("t", x).held_by == a
    assert drain_in_order(dq, 2) == ["a", "x"]
    assert active_fields(dq) == 0


def test_finding_a_negative_place_written_before_seq_base_is_put_at_zero(dq):
    """Places recorded before SEQ_BASE could be negative: one read from the key's record, and a
    waiting member "-00000000000001", are read, not refused: the place counts as 0 (the front of
    the line), so the message comes back and the line still drains, in order."""
    ordered(dq)
    x = dq.publish("t", "x", order_key="k")
    y = dq.publish("t", "y", order_key="k")
    g = key_partition(dq, "k")
    dq.redis.hset(g.active, "\x01k", f"{x}|-5")             # as an undo before SEQ_BASE left it
    dq.remove("t", [x], event="deleted", states=[MessageState.ready], hold="old")
    assert dq.get("t", y).state is MessageState.ready       # the removal passed the key to y
    assert dq.undo("t", "old").restored == 1
    assert dq.get("t", y).held_by == x                       # x at place 0, before y's sequence
    [member] = dq.redis.zrange(g.waiting, 0, -1)
    assert member.split(b"\0")[1] == f"{SEQ_BASE + 1:015d}".encode()
    # y's own entry rewritten as a line written before SEQ_BASE with a negative place would be
    # (and in that format: the due time before the id)
    due = member.split(b"\0")[3]
    dq.redis.zrem(g.waiting, member)
    dq.redis.zadd(g.waiting, {b"k\0" + b"-00000000000001\0" + due + b"\0" + y.encode(): 0})
    dq.redis.zadd(g.pending, {y: 2 ** 50 - 1})
    assert drain_in_order(dq, 2) == ["x", "y"]              # the ack of x promotes y
    assert active_fields(dq) == 0


def test_finding_undo_of_a_kill_that_kept_the_key_leaves_the_message_active(dq):
    """hold_key_on_dead: the killed active message x keeps its key as a dead letter. Undo puts it
    back to retrying still holding the key, out of the line: f stays held behind it."""
    ordered(dq, hold_key_on_dead=True)
    x = dq.publish("t", "x", order_key="k")
    f = dq.publish("t", "f", order_key="k")
    [d] = dq.claim("t", 1)
    assert d.message.id == x
    dq.nack(d, "boom", retry_in=600)
    assert dq.kill_many("t", [x], hold="op") == [0]
    assert dq.get("t", f).held_by == x
    assert dq.undo("t", "op").restored == 1
    m = dq.get("t", x)
    assert m.state is MessageState.retrying and m.held_by is None
    assert dq.get("t", f).held_by == x
    g = key_partition(dq, "k")
    assert waiting_ids(dq, g) == [f]
    dq.deliver_now("t", x)
    assert drain_in_order(dq, 2) == ["x", "f"]


def test_finding_undo_of_a_kept_key_holds_after_hold_key_on_dead_is_turned_off(dq):
    """The dead letter x keeps its key (hold_key_on_dead when killed); the setting is turned off
    before the undo. Undo reads the key's holder, not the setting: x goes back to retrying still
    holding it, f stays behind it (it was put both in the line and active: nothing was delivered)."""
    ordered(dq, hold_key_on_dead=True)
    x = dq.publish("t", "x", order_key="k")
    f = dq.publish("t", "f", order_key="k")
    [d] = dq.claim("t", 1)
    dq.nack(d, "boom", retry_in=600)
    assert dq.kill_many("t", [x], hold="op") == [0]
    ordered(dq, hold_key_on_dead=False)
    assert dq.undo("t", "op").restored == 1
    assert dq.get("t", x).state is MessageState.retrying and dq.get("t", f).held_by == x
    g = key_partition(dq, "k")
    assert waiting_ids(dq, g) == [f]
    dq.deliver_now("t", x)
    assert drain_in_order(dq, 2) == ["x", "f"]


@pytest.mark.parametrize("holds", [("op1", "op2"), ("o", "o")], ids=["two-holds", "one-hold"])
def test_finding_a_message_promoted_without_a_hold_keeps_its_own_place(dq, holds):
    """y active, x m f held. m removed (held), y cancelled without a hold (x promoted: promote_key
    records x's own sequence), x removed (held): x comes back at its place, before m, not at one
    before the first waiting (f), which was m's own sequence: a tie that put m first."""
    ordered(dq)
    y = dq.publish("t", "y", order_key="k")
    x = dq.publish("t", "x", order_key="k", delay=60)
    m = dq.publish("t", "m", order_key="k")
    dq.publish("t", "f", order_key="k")
    dq.remove("t", [m], event="deleted", states=[MessageState.pending], hold=holds[0])
    dq.cancel("t", y)
    assert recorded_place(dq, "k") == f"{x}|{SEQ_BASE + 1:015d}"
    dq.remove("t", [x], event="deleted", states=[MessageState.pending], hold=holds[1])
    for op in dict.fromkeys(holds):
        dq.undo("t", op)
    assert dq.get("t", x).held_by is None and dq.get("t", m).held_by == x
    dq.deliver_now("t", x)
    assert drain_in_order(dq, 3) == ["x", "m", "f"]


@pytest.mark.single_partition   # the other key's sequences must be in k's partition
def test_finding_a_free_key_taker_with_a_recorded_place_goes_back_to_it(dq):
    """m (active) removed when the group's last sequence was o2's; x took the free key by a publish,
    y waited behind it and was removed: that recorded x's place, one before y, after m's. Undo of m
    puts x back in its place behind m; without a recorded place x would keep the key."""
    ordered(dq)
    dq.publish("t", "o1", order_key="other")
    dq.publish("t", "o2", order_key="other")
    m = dq.publish("t", "m", order_key="k")
    dq.remove("t", [m], event="deleted", states=[MessageState.ready], hold="op1")
    dq.publish("t", "o3", order_key="other")
    x = dq.publish("t", "x", order_key="k")
    assert recorded_place(dq, "k") is None
    y = dq.publish("t", "y", order_key="k")
    dq.remove("t", [y], event="deleted", states=[MessageState.pending], hold="op2")
    assert recorded_place(dq, "k") is not None
    assert dq.undo("t", "op1").restored == 1
    assert dq.get("t", x).held_by == m and dq.get("t", m).held_by is None


def line_is_empty(dq):
    """No message holds a key, waits in a line, or is left to claim."""
    waiting = sum(dq.redis.zcard(dq.keys("t", p).g.waiting) for p in range(dq.layout("t").partitions))
    return active_fields(dq) == 0 and waiting == 0 and dq.claim("t", 5) == []


def test_finding_undo_tied_places_leave_no_message_undelivered(dq):
    """x (active) and its follower f removed with a hold; g takes the free key and is removed with
    another hold: nobody waited then, and g's place was the group's last sequence, f's own (now a
    fresh one). Both undone, g removed without a hold: its removal must take g's entry in the line,
    not f's (it took the first of the two at that place), or f waits for ever behind a message
    that is gone."""
    ordered(dq)
    x = dq.publish("t", "x", order_key="k")
    f = dq.publish("t", "f", order_key="k")
    assert dq.remove("t", [x, f], event="deleted", states=[MessageState.pending, MessageState.ready],
                     hold="op1") == [0, 0]
    g = dq.publish("t", "g", order_key="k")   # takes the free key
    assert dq.remove("t", [g], event="deleted", states=[MessageState.ready], hold="op2") == [0]
    assert dq.undo("t", "op1").restored == 2
    assert dq.undo("t", "op2").restored == 1
    assert dq.get("t", f).held_by == x and dq.get("t", g).held_by == x
    assert dq.remove("t", [g], event="deleted", states=[MessageState.pending]) == [0]
    assert drain_in_order(dq, 2) == ["x", "f"]
    assert line_is_empty(dq)


def w_and_x_removed_at_one_place(dq):
    """v holds k, w waits behind it (due in 60 s) and is removed with a hold (op1); v is acked, the
    key is free. x takes it, f waits behind x; x is removed with another hold (op2): its place is
    one before f, which is w's own sequence. Returns w, x, f."""
    ordered(dq)
    dq.publish("t", "v", order_key="k")
    w = dq.publish("t", "w", order_key="k", delay=60)
    assert dq.remove("t", [w], event="deleted", states=[MessageState.pending], hold="op1") == [0]
    assert drain_in_order(dq, 1) == ["v"]
    x = dq.publish("t", "x", order_key="k")
    f = dq.publish("t", "f", order_key="k")
    assert dq.remove("t", [x], event="deleted", states=[MessageState.ready], hold="op2") == [0]
    return w, x, f


@pytest.mark.parametrize("undos", [("op1", "op2"), ("op2", "op1")], ids=["w-first", "x-first"])
def test_finding_undo_orders_tied_places_by_publish_order(dq, undos):
    """v holds k, w waits behind it (due in 60 s) and is removed with a hold; v is acked, the key
    is free. x takes it, f waits behind x; x is removed with another hold: its place is one before
    f, which is w's own sequence. Undone in either order, w comes back before x (publish order),
    whichever came back first and whatever their due times."""
    w, x, f = w_and_x_removed_at_one_place(dq)
    for op in undos:
        assert dq.undo("t", op).restored == 1
    assert dq.get("t", w).held_by is None and dq.get("t", x).held_by == w and dq.get("t", f).held_by == w
    deliver_key_holders_now(dq, [w])
    assert drain_in_order(dq, 3) == ["w", "x", "f"]
    assert line_is_empty(dq)


def tied_behind_a_claimed_holder(dq):
    """As above, but a worker claimed f (the key's holder once x went) before the undos: f keeps
    the key, and w and x both wait behind it at one place (w's sequence). Returns w, x and f's
    delivery."""
    w, x, f = w_and_x_removed_at_one_place(dq)
    [d] = dq.claim("t", 1)
    assert d.message.id == f
    for op in ("op2", "op1"):
        assert dq.undo("t", op).restored == 1
    assert dq.get("t", w).held_by == f and dq.get("t", x).held_by == f
    places = {m.split(b"\0")[1] for m in dq.redis.zrange(key_partition(dq, "k").waiting, 0, -1)}
    assert len(places) == 1   # the tie this is about
    return w, x, d


def test_finding_tied_places_behind_a_claimed_holder_wait_in_publish_order(dq):
    """w, published first, comes first, though x is due earlier."""
    w, x, d = tied_behind_a_claimed_holder(dq)
    dq.ack(d)   # passes the key to the first in line
    assert dq.get("t", w).held_by is None and dq.get("t", x).held_by == w
    deliver_key_holders_now(dq, [w])
    assert drain_in_order(dq, 2) == ["w", "x"]
    assert line_is_empty(dq)


@pytest.mark.parametrize("hold", [None, "op3"], ids=["no-hold", "hold"])
@pytest.mark.parametrize("gone", ["w", "x"])
def test_finding_a_removal_takes_its_own_entry_of_two_at_one_place(dq, gone, hold):
    """One of two messages waiting at one place is removed (held or not): its own entry leaves the
    line, not the first at that place, and the other is delivered after the holder."""
    w, x, d = tied_behind_a_claimed_holder(dq)
    (victim, other), kept = ((w, x), "x") if gone == "w" else ((x, w), "w")
    assert dq.remove("t", [victim], event="deleted", states=[MessageState.pending], hold=hold) == [0]
    assert waiting_ids(dq, key_partition(dq, "k")) == [other]
    dq.ack(d)
    assert dq.get("t", other).held_by is None
    deliver_key_holders_now(dq, [other])
    assert drain_in_order(dq, 1) == [kept]
    assert line_is_empty(dq)
    if hold:
        assert dq.undo("t", hold).restored == 1
        deliver_key_holders_now(dq, [victim])
        assert drain_in_order(dq, 1) == [gone]
        assert line_is_empty(dq)


def test_a_line_written_before_the_id_followed_the_place_is_still_read(dq):
    """Members written as "<key>\\0<place>\\0<due>\\0<id>" (before the id followed the place) are
    found by their id: y's removal takes its own entry, z's hold reads its due time (in 60 s) from
    it, and undo puts z back in the current format; x's ack then promotes z, due when it was."""
    ordered(dq)
    x = dq.publish("t", "x", order_key="k")
    y = dq.publish("t", "y", order_key="k")
    z = dq.publish("t", "z", order_key="k", delay=60)
    g = key_partition(dq, "k")
    for member in dq.redis.zrange(g.waiting, 0, -1):
        okey, place, msg_id, due = member.split(b"\0")
        dq.redis.zrem(g.waiting, member)
        dq.redis.zadd(g.waiting, {b"\0".join([okey, place, due, msg_id]): 0})
    assert dq.remove("t", [y], event="deleted", states=[MessageState.pending]) == [0]
    assert waiting_ids(dq, g) == [z]
    assert dq.remove("t", [z], event="deleted", states=[MessageState.pending], hold="h") == [0]
    assert dq.redis.zcard(g.waiting) == 0
    assert dq.undo("t", "h").restored == 1
    assert waiting_ids(dq, g) == [z] and dq.get("t", z).held_by == x
    assert drain_in_order(dq, 1) == ["x"]
    m = dq.get("t", z)
    assert m.state is MessageState.pending and m.held_by is None and m.due_at is not None
    deliver_key_holders_now(dq, [z])
    assert drain_in_order(dq, 1) == ["z"]
    assert line_is_empty(dq)
