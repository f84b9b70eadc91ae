"""find (lua/find.lua): one message from anywhere, by id, id prefix or dedup key; where it was last
seen once no group holds it."""

import pytest

from queue_core import InvalidArgument, MessageState


def test_find_by_id_names_every_group_and_state_it_is_in(dq):
    """An id is found in whatever state each group holds it, and nowhere else."""
    dq.configure_group("orders", "billing")
    mid = dq.publish("orders", {"n": 1})
    dq.publish("other", {"n": 2})
    [d] = dq.claim("orders", 5, group="billing")
    assert d.id == mid
    result = dq.find(mid)
    places = {(f.topic, f.group, f.state) for f in result.found}
    assert {("orders", "default", MessageState.ready), ("orders", "billing", MessageState.unacked)} <= places
    assert all(f.topic == "orders" and f.id == mid for f in result.found)
    assert result.complete and not result.seen


def test_find_by_dedup_key_and_by_lowercase_id(dq):
    """A dedup key leads to its message; an id typed in lower case still matches."""
    mid = dq.publish("orders", {"n": 1}, key="order-1234")
    [by_key] = [f for f in dq.find("order-1234").found if f.group == "default"]
    assert (by_key.id, by_key.state, by_key.group) == (mid, MessageState.ready, "default")
    assert {f.id for f in dq.find(mid.lower()).found} == {mid}
    assert dq.find("order-9999").found == []


def test_find_by_id_prefix_across_topics(dq):
    """An id prefix finds the messages whose ids start with it, in any topic."""
    ids = dq.publish_many("orders", ["a", "b", "c"])
    other = dq.publish("refunds", "d")
    every = [*ids, other]
    for prefix in (ids[1][:25], ids[0][:10], ids[0][:4], other[:20]):
        found = dq.find(prefix).found
        assert {f.id for f in found} == {i for i in every if i.startswith(prefix)}, prefix
        assert {(f.topic, f.id) for f in found} <= {("orders", i) for i in ids} | {("refunds", other)}


def test_find_gone_message_says_where_it_was_last_seen(dq):
    """Once acked, no group holds the message: the event stream tells what happened last."""
    mid = dq.publish("orders", "x")
    [d] = dq.claim("orders", 1)
    dq.ack(d)
    result = dq.find(mid)
    assert [f for f in result.found if f.group == "default"] == []
    events = [s.event for s in result.seen]
    assert events[0] == "acked" and events[-1] == "published"   # newest first, back to its publish
    assert "claimed" in events
    assert {s.group for s in result.seen if s.event == "acked"} == {"default"} and result.seen[0].at is not None


def test_find_last_seen_walks_a_long_stream_in_bounded_calls(dq):
    """The walk back through thousands of entries is cut into calls of a few ms, and still arrives."""
    mid = dq.publish("orders", "first")
    [d] = dq.claim("orders", 1)
    dq.reject(d, "bad input")
    for i in range(3000):   # one stream entry each (one publish call per message)
        dq.publish("orders", i)
    assert dq.delete("orders", [mid]) == 1
    result = dq.find(mid, budget_s=10)
    assert result.complete and not [f for f in result.found if f.group == "default"]
    assert [s.event for s in result.seen][:1] == ["deleted"]
    assert "dead" in [s.event for s in result.seen] and result.seen[-1].event == "published"


def test_find_refuses_empty_and_oversized_text(dq):
    with pytest.raises(InvalidArgument, match="id prefix or a dedup key"):
        dq.find("  ")
    with pytest.raises(InvalidArgument):
        dq.find("x" * 301)


def test_find_stops_at_its_budget_and_says_so(dq):
    """A prefix search over many records with no time left reports itself incomplete."""
    dq.publish_many("orders", list(range(50)))
    result = dq.find("0000", budget_s=0)
    assert not result.complete and "id-prefix search stopped" in result.gaps[0]
