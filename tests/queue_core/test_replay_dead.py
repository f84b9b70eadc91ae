"""replay_dead (lua/replay_dead.lua): the dead-letter queue or one error group replayed in bounded batches."""

import pytest

from queue_core import StateConflict
from queue_core.keys import partition_of

from .helpers import assert_counts, kill


def test_replay_dead_walks_everything_in_batches(dq):
    kill(dq, "t", 1234)
    seen = []
    assert dq.replay_dead("t", batch=100, progress=seen.append) == 1234
    assert seen[-1] == 1234 and len(seen) == 13
    assert_counts(dq, "t", ready=1234)
    assert dq.error_groups("t") == []


def test_replay_dead_one_error_group(dq):
    ids = kill(dq, "t", 10, error=lambda d: "db down" if d.message.text() in ("m1", "m3") else "bad input")
    groups = {g.sample_message: g for g in dq.error_groups("t")}
    assert groups["db down"].count == 2 and groups["bad input"].count == 8
    assert dq.replay_dead("t", fingerprint=groups["db down"].fingerprint) == 2
    assert_counts(dq, "t", ready=2, dead=8)
    assert {d.id for d in dq.claim("t", 10)} == {ids[1], ids[3]}
    assert [g.count for g in dq.error_groups("t")] == [8]


def test_replay_dead_takes_only_letters_dead_at_start(dq):
    """Messages that die again during a replay are not replayed again by the same call."""
    kill(dq, "t", 5)
    assert dq.replay_dead("t", batch=2) == 5
    for d in dq.claim("t", 5):
        dq.nack(d, "boom")
    assert_counts(dq, "t", dead=5)


def test_replay_dead_stops_at_corrupt_letter_with_clear_error(dq):
    ids = kill(dq, "t", 3)
    dq.redis.hdel(dq.keys("t", partition_of(ids[0])).msgs, ids[0])
    with pytest.raises(StateConflict, match="corrupt"):
        dq.replay_dead("t")
    dq.delete("t", [ids[0]])
    assert dq.replay_dead("t") == 2
