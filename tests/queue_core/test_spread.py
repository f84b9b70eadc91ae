"""spread (queue_core/engine/forecast.py, lua/reschedule.lua with a due time per id): messages get
due times spaced evenly over a window, never earlier than Redis's clock, compare-and-set."""

import math
from datetime import UTC, datetime

import pytest

from queue_core import InvalidArgument, MessageState
from queue_core.errors import Code

from .helpers import assert_counts, server_ms


def _due_ms(dq, mid) -> int:
    return round(dq.get("t", mid).due_at.timestamp() * 1000)


def test_spread_spaces_messages_evenly_over_the_window_in_the_order_given(dq):
    ids = dq.publish_many("t", [str(i) for i in range(10)], delay=3600)
    start = server_ms(dq) + 60_000
    assert dq.spread("t", ids, over=10, start_ms=start) == [0] * 10
    assert [_due_ms(dq, m) for m in ids] == [start + k * 1000 for k in range(10)]
    assert_counts(dq, "t", pending=10)
    last = dq.get("t", ids[-1]).history[-1]
    assert last.event == "rescheduled" and str(start + 9000) in last.detail


def test_spread_in_batches_keeps_one_spacing(dq):
    ids = dq.publish_many("t", [str(i) for i in range(6)], delay=3600)
    start = server_ms(dq) + 60_000
    dq.spread("t", ids[:4], over=60, start_ms=start, slot=0, slots=6)
    dq.spread("t", ids[4:], over=60, start_ms=start, slot=4, slots=6)
    assert [_due_ms(dq, m) for m in ids] == [start + k * 10_000 for k in range(6)]


def test_spread_never_makes_a_message_due_before_now(dq):
    ids = dq.publish_many("t", ["a", "b"], delay=3600)
    before = server_ms(dq)
    dq.spread("t", ids, over=1, start_ms=before - 3_600_000)    # a window long past: both due now
    assert all(_due_ms(dq, m) >= before for m in ids)
    assert sorted(d.id for d in dq.claim("t", 10)) == sorted(ids)


def test_spread_with_no_start_begins_at_redis_clock(dq):
    ids = dq.publish_many("t", ["a", "b", "c", "d"], delay=3600)
    before = server_ms(dq)
    dq.spread("t", ids, over=40)
    dues = [_due_ms(dq, m) for m in ids]
    # Slot 0 is Redis's clock when read, and the script's clock a moment later if that is later.
    assert before <= dues[0] <= server_ms(dq) and [d - dues[1] for d in dues[1:]] == [0, 10_000, 20_000]
    assert 9_990 <= dues[1] - dues[0] <= 10_000


def test_spread_refuses_held_ready_and_too_distant_messages_and_moves_the_rest(dq):
    dq.configure_group("t", "default", ordered=True)
    dq.configure_topic("t", max_delay=600)
    head = dq.publish("t", "h", order_key="k", delay=60)
    held = dq.publish("t", "f", order_key="k", delay=60)   # waits behind head: the key keeps its order
    ready = dq.publish("t", "r")
    start = server_ms(dq)
    codes = dq.spread("t", [head, held, ready, "NOPE"], over=300, start_ms=start)
    assert codes == [0, Code.STATE_CONFLICT, Code.STATE_CONFLICT, Code.NOT_FOUND]
    assert dq.spread("t", [head], over=10, start_ms=start + 3_600_000) == [Code.DELAY_TOO_LONG]
    assert dq.get("t", ready).state is MessageState.ready


@pytest.mark.parametrize("kwargs", [{"slot": 3, "slots": 4}, {"slot": -1}, {"over": -1}])
def test_spread_refuses_slots_outside_the_window(dq, kwargs):
    ids = dq.publish_many("t", ["a", "b"], delay=60)
    with pytest.raises(InvalidArgument):
        dq.spread("t", ids, **kwargs)



def _at(ms: int):
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def test_finding_spread_not_before_keeps_a_later_own_due_time(dq):
    start = server_ms(dq) + 60_000
    own = [start + 25_000, start + 1000, start]      # a's own time is after its slot; b's and c's before
    ids = [dq.publish("t", name, at=_at(t)) for name, t in zip("abc", own, strict=True)]
    assert [_due_ms(dq, m) for m in ids] == own
    assert dq.spread("t", ids, over=30, start_ms=start, not_before=own) == [0] * 3
    assert [_due_ms(dq, m) for m in ids] == [start + 25_000, start + 10_000, start + 20_000]
    with pytest.raises(InvalidArgument, match="not_before holds 1"):
        dq.spread("t", ids, over=30, start_ms=start, not_before=[start])


def test_finding_spread_never_undoes_a_later_due_time_set_after_its_read(dq):
    """A review found spread compared only the state: a publish or reschedule that pushed a message
    later between the caller's read of its due time (not_before) and the move was undone."""
    start = server_ms(dq) + 60_000
    mid = dq.publish("t", "x", at=_at(start))
    seen = [_due_ms(dq, mid)]                        # the spread's read
    dq.publish("t", "y")                             # (another message, so the window has two slots)
    dq.reschedule("t", mid, at=_at(start + 50_000))                  # pushed later meanwhile
    assert dq.spread("t", [mid], over=30, start_ms=start, not_before=seen) == [0]
    assert _due_ms(dq, mid) == start + 50_000


@pytest.mark.parametrize("over", [math.inf, math.nan])
def test_finding_spread_refuses_a_non_finite_window(dq, over):
    ids = dq.publish_many("t", ["a"], delay=60)
    with pytest.raises(InvalidArgument, match="finite number of seconds"):
        dq.spread("t", ids, over=over)
