import pytest

from queue_core import LeaseLost

from .helpers import assert_counts, server_ms


def test_extend_moves_the_lease_deadline(dq):
    dq.configure_topic("t", visibility_timeout=1)
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    before = server_ms(dq)
    deadline = dq.extend(d, 120)
    after = server_ms(dq)          # extend read Redis's clock between the two
    assert before + 120_000 <= deadline.timestamp() * 1000 <= after + 120_000
    assert dq.get("t", d.id).lease_deadline == deadline
    assert_counts(dq, "t", unacked=1)
    dq.ack(d)  # the token is unchanged by extend


def test_extend_after_ack_is_refused(dq):
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    dq.ack(d)
    with pytest.raises(LeaseLost):
        dq.extend(d, 10)
    assert_counts(dq, "t")
