"""replay_edited (lua/replay_edited.lua): a dead letter's payload replaced and replayed, compare-and-
set on the payload seen."""

import hashlib

import pytest

from queue_core import RetryPolicy

pytestmark = pytest.mark.own_layout  # builds its own partitions and groups


def counts(q, topic, group):
    return {s.value: n for s, n in q.counts(topic, group=group).items() if n}


def test_edit_and_replay_in_one_group_leaves_the_others_payload(dq):
    dq.configure_group("t", "billing", retry=RetryPolicy.fixed(0, max_attempts=1))
    mid = dq.publish("t", '{"amount": 1}')
    dq.nack(dq.claim("t", group="billing")[0], "bad amount")
    seen = hashlib.sha1(b'{"amount": 1}').hexdigest()
    new_id = dq.replay_edited("t", mid, '{"amount": 2}', seen, group="billing")
    assert new_id != mid                                        # billing got its own copy
    assert dq.get("t", new_id, group="billing").payload == b'{"amount": 2}'
    assert dq.get("t", mid).payload == b'{"amount": 1}'         # default's delivery is unchanged
    assert dq.get("t", mid, group="billing") is None                  # the original left billing
    assert counts(dq, "t", "billing") == {"ready": 1}


def test_edit_and_replay_with_one_group_keeps_the_id(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    mid = dq.publish("t", "old")
    dq.nack(dq.claim("t")[0], "bad")
    assert dq.replay_edited("t", mid, "new", hashlib.sha1(b"old").hexdigest()) == mid
    assert dq.get("t", mid).payload == b"new"
