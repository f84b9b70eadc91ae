import pytest

from queue_core import LeaseLost, MessageState, RetryPolicy

from .helpers import assert_counts, events, server_ms


def fail_once(dq, topic, error="boom", **kw):
    """Claim and nack once; (delivery, new state, (server ms before the nack, server ms after)).
    The nack's own clock reading lies between the two, however slow the machine is."""
    d = dq.claim(topic)[0]
    before = server_ms(dq)
    state = dq.nack(d, error, **kw)
    return d, state, (before, server_ms(dq))


def test_nack_schedules_retry_by_policy(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(7, max_attempts=3))
    mid = dq.publish("t", "x")
    d, state, (before, after) = fail_once(dq, "t", ValueError("bad value 42"))
    assert state is MessageState.retrying
    assert_counts(dq, "t", retrying=1)
    m = dq.get("t", mid)
    assert before + 7000 <= m.due_at.timestamp() * 1000 <= after + 7000
    assert m.attempts == 1
    assert m.last_error.type == "ValueError" and m.last_error.message == "bad value 42"
    assert "ValueError" in m.last_error.traceback or m.last_error.traceback == ""
    assert [h.event for h in m.history] == ["published", "claimed", "nacked"]


def test_nack_retry_in_overrides_one_delay(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(60))
    mid = dq.publish("t", "x")
    _, _, (before, after) = fail_once(dq, "t", retry_in=0.5)
    due = dq.get("t", mid).due_at.timestamp() * 1000
    assert before + 500 <= due <= after + 500


def test_exhausted_attempts_go_dead_with_error_group(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=2))
    mid = dq.publish("t", "x")
    for expected in (MessageState.retrying, MessageState.dead):
        d = dq.claim("t")[0]
        assert dq.nack(d, KeyError("user 17 missing")) is expected
    assert_counts(dq, "t", dead=1)
    m = dq.get("t", mid)
    assert m.attempts == 2 and m.dead_at is not None
    groups = dq.error_groups("t")
    assert len(groups) == 1 and groups[0].count == 1 and groups[0].error_type == "KeyError"
    assert groups[0].fingerprint == m.last_error.fingerprint
    assert [e["event"] for e in events(dq, "t")][-2:] == ["nacked", "dead"]


def test_errors_differing_only_in_ids_share_a_group(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.publish_many("t", ["a", "b", "c"])
    for i, d in enumerate(dq.claim("t", 3)):
        dq.nack(d, TimeoutError(f"upstream 10.0.0.{i} timed out after {i * 7} ms") if i < 2 else "other")
    groups = dq.error_groups("t")
    assert sorted(g.count for g in groups) == [1, 2]


def test_message_max_attempts_overrides_policy(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(0, max_attempts=10))
    dq.publish("t", "x", max_attempts=1)
    assert dq.nack(dq.claim("t")[0], "no") is MessageState.dead


def test_reject_dead_letters_at_once(dq):
    mid = dq.publish("t", "x")
    d = dq.claim("t")[0]
    assert dq.reject(d, "invalid schema") is MessageState.dead
    assert_counts(dq, "t", dead=1)
    assert dq.get("t", mid).history[-1].event == "rejected"


def test_nack_with_stale_token_refused(dq):
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    dq.ack(d)
    with pytest.raises(LeaseLost):
        dq.nack(d, "late")
    with pytest.raises(LeaseLost):
        dq.reject(d, "late")
    assert_counts(dq, "t")


def test_long_traceback_and_message_are_truncated(dq):
    dq.publish("t", "x")
    d = dq.claim("t")[0]
    try:
        raise RuntimeError("m" * 5000)
    except RuntimeError as exc:
        err = exc
    dq.nack(d, err)
    m = dq.get("t", d.id)
    assert len(m.last_error.message) == 1024
    assert len(m.last_error.traceback) <= 8192 and m.last_error.traceback.endswith("\n")


@pytest.mark.parametrize("policy", [
    RetryPolicy.fixed(2, max_attempts=6),
    RetryPolicy.linear(0.5, max_delay=1.2, max_attempts=6),
    RetryPolicy.exponential(0.1, 3, max_delay=2, max_attempts=6),
    RetryPolicy.custom([0.3, 1, 4], max_attempts=6),
])
def test_lua_delays_equal_the_python_policy(dq, policy):
    """The engine's backoff (in Lua) equals RetryPolicy.delay_ms, which previews use."""
    dq.configure_topic("t", retry=policy)
    mid = dq.publish("t", "x")
    for attempt in range(1, policy.max_attempts):
        if attempt > 1:
            dq.deliver_now("t", mid)
        d = dq.claim("t")[0]
        assert d.attempt == attempt
        dq.nack(d, "fail")
        m = dq.get("t", mid)
        nack_ts = m.history[-1].at.timestamp() * 1000
        assert round(m.due_at.timestamp() * 1000 - nack_ts) == policy.delay_ms(attempt)


def test_jitter_spreads_delays_within_bounds(dq):
    dq.configure_topic("t", retry=RetryPolicy.fixed(10, jitter=0.5))
    dq.publish_many("t", ["x"] * 40)
    delays = []
    for d in dq.claim("t", 40):
        dq.nack(d, "e")
        m = dq.get("t", d.id)
        delays.append(m.due_at.timestamp() * 1000 - m.history[-1].at.timestamp() * 1000)
    assert all(5000 <= x <= 15000 for x in delays)
    assert len({round(x) for x in delays}) > 20
