"""acked (queue_core/engine/read.py): which messages the event stream records as acked in a group,
read forward from a time or from where the previous call stopped — what tells an ack from a
delete, a cancel or an expiry (the canary replay's verdict counts acks this way)."""

import pytest

from queue_core import InvalidArgument
from queue_core.keys import partition_of

from .helpers import server_ms


def test_acked_tells_an_ack_from_a_delete_and_a_cancel(dq):
    dq.configure_group("t", "other")
    before = server_ms(dq)
    ids = [dq.publish("t", str(i)) for i in range(5)]
    claimed = {d.message.id: d for d in dq.claim("t", 10)}
    dq.ack(claimed[ids[0]])
    dq.ack(claimed[ids[1]])
    dq.release([claimed[i] for i in ids[2:]])
    dq.delete("t", [ids[2]], state="ready")
    dq.cancel("t", ids[3])
    other = {d.message.id: d for d in dq.claim("t", 10, group="other")}
    dq.ack(other[ids[4]])                          # acked in another group only
    assert dq.states("t", ids[:4]) == [None] * 4   # gone, all four alike to states()
    seen = dq.acked("t", ids, since=before)
    assert seen.ids == ids[:2] and seen.complete
    assert dq.acked("t", ids, group="other", since=before).ids == [ids[4]]
    assert dq.acked("t", ids, since=server_ms(dq) + 60_000).ids == []   # nothing from then on


def test_acked_reads_on_from_its_cursor_and_stops_at_its_quota(dq):
    before = server_ms(dq)
    first = dq.publish("t", "first")
    dq.ack(dq.claim("t")[0])
    for i in range(600):                           # an entry each: more than one XRANGE chunk
        dq.publish("t", i, delay=3600, partition=partition_of(first))
    part = dq.acked("t", [first], since=before, max_entries=500)
    assert part.ids == [first] and not part.complete
    rest = dq.acked("t", [first], since=part.cursor)
    assert rest.complete and rest.ids == []        # the ack was read once, before the cursor
    late = dq.publish("t", "late", partition=partition_of(first))
    dq.ack(dq.claim("t")[0])
    assert dq.acked("t", [first, late], since=rest.cursor).ids == [late]   # only what came after


def test_acked_with_events_off_sees_no_acks(dq):
    dq.configure_topic("quiet", events=False)
    before = server_ms(dq)
    msg_id = dq.publish("quiet", "x")
    dq.ack(dq.claim("quiet")[0])
    assert dq.acked("quiet", [msg_id], since=before).ids == []


def test_acked_refuses_more_than_a_thousand_ids(dq):
    with pytest.raises(InvalidArgument, match="at most 1,000 ids"):
        dq.acked("t", ["x"] * 1001)
