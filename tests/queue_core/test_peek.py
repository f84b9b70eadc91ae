"""peek (lua/peek.lua): pages of one state, by cursor or offset, merged over the partitions."""

import pytest

from queue_core import InvalidArgument, MessageState, RetryPolicy


def test_page_with_cursor_walks_every_message_once(dq):
    ids = dq.publish_many("t", [str(i) for i in range(230)])
    seen, cursor = [], None
    while True:
        page = dq.page("t", "ready", limit=50, after=cursor)
        seen += [m.id for m in page.messages]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert seen == ids


def test_cursor_survives_the_cursor_message_leaving(dq):
    ids = dq.publish_many("t", [str(i) for i in range(10)])
    page = dq.page("t", "ready", limit=5)
    dq.cancel("t", ids[4])
    rest = dq.page("t", "ready", limit=5, after=page.next_cursor)
    assert [m.id for m in rest.messages] == ids[5:]


def test_peek_offset_and_states(dq):
    dq.publish_many("t", ["a", "b", "c"])
    assert [m.text() for m in dq.peek("t", MessageState.ready, offset=1, limit=5)] == ["b", "c"]
    assert dq.peek("t", "dead") == []


@pytest.mark.parametrize("cursor", ["garbage", "1/2/3", "abc/01ABC", "1/" + "x" * 200, "1/a b", "1e999999/x\n"])
def test_a_malformed_page_cursor_is_refused_before_redis_sees_it(dq, cursor):
    dq.publish("orders", "x")
    with pytest.raises(InvalidArgument, match="malformed page cursor"):
        dq.page("orders", "ready", after=cursor)
    with pytest.raises(InvalidArgument, match="malformed page cursor"):
        dq.group_page("orders", "abc", after="zzz:" + cursor)
    first = dq.page("orders", "ready", limit=1)
    assert dq.page("orders", "ready", after=first.next_cursor).messages == []   # our own cursors pass
    assert "/" not in first.next_cursor and first.messages[0].id not in first.next_cursor   # opaque


def _walk(dq, topic, state, *, reverse, limit, after=None, **kw):
    seen, cursor = [], after
    while True:
        page = dq.page(topic, state, limit=limit, after=cursor, reverse=reverse, **kw)
        seen += [m.id for m in page.messages]
        if not page.next_cursor:
            return seen
        cursor = page.next_cursor


def _spread(dq, topic="t"):
    """Messages over 3 partitions with scores that interleave between them, and ties (one
    publish_many shares one due time) broken by id."""
    dq.configure_topic(topic, partitions=3)
    ids = []
    for delay in (30, 10, 20):
        ids += dq.publish_many(topic, [f"{delay}-{i}" for i in range(40)], delay=delay)
    return ids


def test_reverse_pages_walk_every_message_once_newest_first_over_several_partitions(dq):
    ids = _spread(dq)
    forward = _walk(dq, "t", "pending", reverse=False, limit=7)
    backward = _walk(dq, "t", "pending", reverse=True, limit=7)
    assert sorted(forward) == sorted(ids) and len(forward) == len(ids)
    assert backward == forward[::-1]
    assert len({m.partition for m in dq.peek("t", "pending", limit=1000)}) == 3   # really several partitions
    due = [m.due_at for m in dq.page("t", "pending", limit=50, reverse=True).messages]
    assert due == sorted(due, reverse=True)


def test_reverse_offset_pages_merge_the_partitions_newest_first(dq):
    _spread(dq)
    forward = [m.id for m in dq.peek("t", "pending", limit=1000)]
    assert [m.id for m in dq.peek("t", "pending", offset=15, limit=10, reverse=True)] == forward[::-1][15:25]


def test_a_reverse_cursor_continues_below_its_row_even_after_the_row_left(dq):
    ids = _spread(dq)
    forward = _walk(dq, "t", "pending", reverse=False, limit=1000)
    first = dq.page("t", "pending", limit=5, reverse=True)
    assert [m.id for m in first.messages] == forward[::-1][:5]
    dq.cancel("t", first.messages[-1].id)   # the cursor's own row leaves: the split is found by search
    rest = _walk(dq, "t", "pending", reverse=True, limit=9, after=first.next_cursor)
    assert rest == forward[::-1][5:]
    assert len(ids) == 120


def test_one_cursor_names_a_position_that_both_directions_continue_from(dq):
    dq.configure_topic("t", partitions=3)
    ids = dq.publish_many("t", [str(i) for i in range(12)])
    middle = dq.page("t", "ready", limit=6)   # its cursor sits after the 6th row
    up = dq.page("t", "ready", limit=50, after=middle.next_cursor)
    down = dq.page("t", "ready", limit=5, after=middle.next_cursor, reverse=True)
    assert [m.id for m in up.messages] == ids[6:]
    assert [m.id for m in down.messages] == ids[:5][::-1]   # below the 6th row, newest first
    assert dq.page("t", "ready", limit=5, after=down.next_cursor, reverse=True).messages == []   # the bottom


def test_reverse_error_group_pages_are_newest_death_first(dq):
    dq.configure_topic("t", partitions=3, retry=RetryPolicy.fixed(0, max_attempts=1))
    for i in range(9):
        dq.publish("t", str(i))
        for d in dq.claim("t", 1):
            dq.nack(d, "boom")
    fp = dq.error_groups("t")[0].fingerprint
    oldest = _walk_groups(dq, fp, reverse=False)
    newest = _walk_groups(dq, fp, reverse=True)
    assert len(oldest) == 9 and newest == oldest[::-1]


def _walk_groups(dq, fp, *, reverse):
    seen, cursor = [], None
    while True:
        page = dq.group_page("t", fp, limit=4, after=cursor, reverse=reverse)
        seen += [m.id for m in page.messages]
        if not page.next_cursor:
            return seen
        cursor = page.next_cursor


def test_finding_page_rows_say_who_holds_a_held_message(dq):
    """A held row of a page (and of a search) comes with its holder, read in the same script call:
    the console marks it without a get() per row."""
    dq.configure_group("t", "default", ordered=True)
    a1, a2, a3 = (dq.publish("t", f"a{i}", order_key="acct-a") for i in range(3))
    b1, b2 = dq.publish("t", "b1", order_key="acct-b"), dq.publish("t", "b2", order_key="acct-b")
    later = dq.publish("t", "later", delay=3600, order_key="acct-c")    # pending by its due time: not held
    dq.claim("t", 10)                                                    # a1 and b1 hold their keys
    rows = {m.id: m for m in dq.page("t", "pending", limit=10).messages}
    assert {i: (m.held, m.held_by) for i, m in rows.items()} == {
        a2: (True, a1), a3: (True, a1), b2: (True, b1), later: (False, None)}
    assert [(m.id, m.held_by) for m in dq.search("t", "pending", "order_key:acct-b").messages] == [(b2, b1)]
    for m in dq.page("t", "unacked", limit=10).messages:
        assert not m.held and m.held_by is None
