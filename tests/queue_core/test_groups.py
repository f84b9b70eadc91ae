"""Consumer groups: every group receives every message and keeps its own states, retries, dead
letters and pause; the payload is stored once and freed by the last group done with it."""


import pytest

from queue_core import GroupConfig, InvalidArgument, MessageState, RetryPolicy

from .helpers import assert_counts, data_keys_empty, entries, events

pytestmark = pytest.mark.own_layout  # builds its own partitions and groups


def counts(q, topic, group):
    return {s.value: n for s, n in q.counts(topic, group=group).items() if n}


def test_every_group_receives_every_message(dq):
    dq.configure_group("t", "billing")
    assert dq.groups("t") == ["default", "billing"]
    ids = dq.publish_many("t", ["a", "b", "c"])
    assert counts(dq, "t", "default") == counts(dq, "t", "billing") == {"ready": 3}
    assert entries(dq, dq.keys("t").msgs) == 3          # stored once, not once per group
    got = dq.claim("t", 3)
    dq.ack_many(got)
    assert counts(dq, "t", "default") == {} and counts(dq, "t", "billing") == {"ready": 3}
    assert entries(dq, dq.keys("t").msgs) == 3          # billing still holds them
    billing = dq.claim("t", 3, group="billing")
    assert sorted(d.id for d in billing) == sorted(ids) and {d.group for d in billing} == {"billing"}
    assert [d.message.text() for d in sorted(billing, key=lambda d: d.id)] == ["a", "b", "c"]
    dq.ack_many(billing)
    assert data_keys_empty(dq, "t")                            # freed by the last group


def test_failures_in_one_group_never_touch_another(dq):
    dq.configure_group("t", "billing", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.configure_group("t", "default", retry=RetryPolicy.fixed(60, max_attempts=5))
    mid = dq.publish("t", "x")
    assert dq.nack(dq.claim("t", group="billing")[0], ValueError("bad card")) is MessageState.dead
    assert dq.nack(dq.claim("t")[0], ValueError("timeout")) is MessageState.retrying
    assert counts(dq, "t", "billing") == {"dead": 1} and counts(dq, "t", "default") == {"retrying": 1}
    assert dq.get("t", mid, group="billing").last_error.message == "bad card"
    assert dq.get("t", mid).last_error.message == "timeout"
    assert [g.error_type for g in dq.error_groups("t", group="billing")] == ["ValueError"]
    assert dq.error_groups("t") == []
    # Replaying in billing moves only billing's copy; purging default leaves billing alone.
    assert dq.replay("t", [mid], group="billing") == 1
    assert counts(dq, "t", "billing") == {"ready": 1}
    assert dq.purge("t", "retrying") == 1
    assert counts(dq, "t", "default") == {} and counts(dq, "t", "billing") == {"ready": 1}
    assert dq.get("t", mid, group="billing").payload == b"x"  # the payload stays for billing
    dq.ack(dq.claim("t", group="billing")[0])
    assert data_keys_empty(dq, "t")


def test_pause_is_per_group(dq):
    dq.configure_group("t", "billing")
    dq.publish("t", "x")
    dq.pause("t", group="billing")
    assert dq.claim_batch("t", 1, group="billing").paused
    assert dq.claim("t", 1, group="billing") == []
    assert len(dq.claim("t", 1)) == 1
    assert dq.group_config("t", "billing").paused and not dq.group_config("t").paused
    dq.resume("t", group="billing")
    assert len(dq.claim("t", 1, group="billing")) == 1


def test_a_group_added_later_gets_only_later_messages(dq):
    first = dq.publish("t", "before")
    dq.configure_group("t", "audit")
    second = dq.publish("t", "after")
    assert [m.id for m in dq.peek("t", "ready", group="audit")] == [second]
    assert sorted(m.id for m in dq.peek("t", "ready")) == sorted([first, second])


def test_cancel_in_one_group_keeps_the_payload_for_the_other(dq):
    dq.configure_group("t", "billing")
    mid = dq.publish("t", "x", key="order-1")
    dq.cancel("t", mid)
    assert dq.get("t", mid) is None
    assert dq.get("t", mid, group="billing").payload == b"x"
    assert dq.find_by_key("t", "order-1") == mid   # the key lives while any group holds the message
    dq.cancel("t", mid, group="billing")
    assert dq.find_by_key("t", "order-1") is None and data_keys_empty(dq, "t")


def test_group_config_round_trips_and_names_are_checked(dq):
    cfg = GroupConfig(visibility_timeout=5, retry=RetryPolicy.linear(2, max_attempts=3), ordered=True,
                      hold_key_on_dead=True, ttl=60, on_expire="drop", dead_max_count=10)
    assert dq.configure_group("t", "billing", cfg) == cfg
    assert dq.group_config("t", "billing") == cfg
    with pytest.raises(InvalidArgument, match="group names"):
        dq.configure_group("t", "bad:name")
    with pytest.raises(InvalidArgument, match="on_expire"):
        GroupConfig(on_expire="explode")


def test_events_name_their_group(dq):
    dq.configure_group("t", "billing")
    mid = dq.publish("t", "x")
    dq.ack(dq.claim("t", group="billing")[0])
    rows = [(e["event"], e["group"]) for e in events(dq, "t", group=None) if e["msg"] == mid]
    assert rows == [("published", None), ("claimed", "billing"), ("acked", "billing")]
    assert_counts(dq, "t", ready=1)


def test_summaries_equal_the_per_group_reads(dq):
    """The overview's batched read gives, for every (topic, group), what counts, throughput and
    group_config give one group at a time."""
    dq.configure_group("sum-a", "billing", retry=RetryPolicy.fixed(0, max_attempts=1), ordered=True)
    dq.publish_many("sum-a", [b"x"] * 5)
    dq.publish("sum-a", b"later", delay=3600)
    dq.publish("sum-b", b"y")
    for d in dq.claim("sum-a", 2, group="billing"):
        dq.nack(d, "boom")                       # dead at once in billing only
    dq.pause("sum-a", "billing")
    pairs = [("sum-a", "default"), ("sum-a", "billing"), ("sum-b", "default")]
    batched = dq.summaries(pairs)
    assert list(batched) == pairs
    for topic, group in pairs:
        alone = {"counts": dq.counts(topic, group=group), **dq.throughput(topic, group=group),
                 "paused": dq.group_config(topic, group).paused, "ordered": dq.group_config(topic, group).ordered}
        got = batched[(topic, group)]
        for field in ("counts", "paused", "ordered", "workers", "overdue_pending", "acked_last_hour",
                      "dead_last_hour"):
            assert got[field] == alone[field], (topic, group, field)
    assert batched[("sum-a", "billing")]["counts"][MessageState.dead] == 2
    assert batched[("sum-a", "billing")]["paused"] and not batched[("sum-a", "default")]["paused"]
    assert batched[("sum-a", "billing")]["ordered"] and not batched[("sum-a", "default")]["ordered"]
    assert batched[("sum-a", "default")]["counts"][MessageState.ready] == 5


def test_snapshot_equals_the_per_group_reads(dq):
    """The metrics scrape's one-pipeline read gives what counts, stats, workers and group_config give."""
    dq.configure_group("snap", "billing", retry=RetryPolicy.fixed(0, max_attempts=1))
    dq.publish_many("snap", [b"x"] * 4)
    dq.publish("snap", b"later", delay=3600)
    for d in dq.claim("snap", 3, group="billing"):
        dq.nack(d, "boom")
    dq.ack_many(dq.claim("snap", 1))
    dq.heartbeat(["snap"], "w-1", group="billing")
    dq.pause("snap", "billing")
    now_ms, snap = dq.snapshot([("snap", "default"), ("snap", "billing")])
    assert abs(now_ms - dq.server_ms()) < 1_000
    for group in ("default", "billing"):
        got = snap[("snap", group)]
        assert got["counts"] == dq.counts("snap", group=group)
        assert got["stats"] == dq.stats("snap", group=group)
        assert got["workers"] == len(dq.workers("snap", group=group))
        assert got["paused"] == dq.group_config("snap", group).paused
    assert snap[("snap", "billing")]["workers"] == 1 and snap[("snap", "default")]["workers"] == 0
    assert snap[("snap", "billing")]["stats"]["dead"] == 3
    oldest = dq.page("snap", "ready", limit=1).messages[0].due_at
    assert snap[("snap", "default")]["oldest_ready_ms"] == round(oldest.timestamp() * 1000)
