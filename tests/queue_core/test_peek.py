"""peek (lua/peek.lua): pages of one state, by cursor or offset, merged over the partitions."""

import pytest

from queue_core import InvalidArgument, MessageState


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
