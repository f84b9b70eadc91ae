"""spreadable (queue_core/engine/forecast.py): what a spread of a group's pending messages would
move, and the last due time among them (the window starts after it)."""

from .test_spread import _due_ms


def test_spreadable_counts_what_has_a_due_time_and_finds_the_last_one(dq):
    assert dq.spreadable("t") == (0, None)
    dq.configure_group("t", "default", ordered=True)
    first = dq.publish("t", "a", delay=60)
    last = dq.publish("t", "b", delay=120)
    dq.publish("t", "held", order_key="k", delay=30)
    dq.publish("t", "held2", order_key="k", delay=30)   # held behind the one before: not counted
    count, last_ms = dq.spreadable("t")
    assert count == 3 and last_ms == _due_ms(dq, last) and last_ms > _due_ms(dq, first)


def test_finding_spreadable_counts_only_up_to_the_windows_end(dq):
    soon = dq.publish_many("t", ["a", "b"], delay=60)
    dq.publish("t", "far", delay=5 * 86_400)
    end = _due_ms(dq, soon[-1])
    assert dq.spreadable("t", until_ms=end) == (2, end)
    assert dq.spreadable("t", until_ms=end - 1)[0] == (1 if _due_ms(dq, soon[0]) < end else 0)
    assert dq.spreadable("t")[0] == 3
