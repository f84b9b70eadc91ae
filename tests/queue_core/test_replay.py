"""replay (lua/replay.lua): dead -> ready (or pending after a delay), attempts reset, compare-and-set."""

from queue_core import MessageState

from .helpers import assert_counts, events, kill


def test_replay_moves_dead_to_ready_and_resets_attempts(dq):
    [mid] = kill(dq, "t", 1)
    assert dq.replay("t", [mid]) == 1
    assert_counts(dq, "t", ready=1)
    m = dq.get("t", mid)
    assert m.state is MessageState.ready and m.attempts == 0 and m.replay_count == 1
    assert m.last_error.message == "boom"  # kept for reference
    assert dq.error_groups("t") == []
    d = dq.claim("t")[0]
    assert d.attempt == 1 and d.message.text() == "m0"


def test_replay_twice_moves_once(dq):
    """Compare-and-set: a double click or a second operator never replays twice."""
    [mid] = kill(dq, "t", 1)
    assert dq.replay("t", [mid]) == 1
    assert dq.replay("t", [mid]) == 0
    assert_counts(dq, "t", ready=1)
    assert sum(1 for e in events(dq, "t") if e["event"] == "replayed") == 1


def test_replay_with_delay_goes_pending(dq):
    [mid] = kill(dq, "t", 1)
    assert dq.replay("t", [mid], delay=60) == 1
    assert_counts(dq, "t", pending=1)


def test_replay_unknown_id_is_skipped(dq):
    kill(dq, "t", 1)
    assert dq.replay("t", ["NOPE"]) == 0
    assert_counts(dq, "t", dead=1)
