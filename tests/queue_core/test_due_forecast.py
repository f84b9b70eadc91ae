"""due_forecast (queue_core/engine/forecast.py): pending and retrying messages falling due per
bucket, by Redis's clock, read with bounded ZCOUNTs."""

import math
from datetime import UTC, datetime

import pytest

from queue_core import DueForecast, InvalidArgument, RetryPolicy
from queue_core.engine.forecast import FORECAST_BUCKETS_PER_CALL

from .helpers import poll, server_ms


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def test_due_forecast_counts_messages_per_bucket_ahead(dq):
    now = server_ms(dq)
    dq.publish_many("t", ["a"] * 3, delay=90)          # bucket 1 of 60 s
    dq.publish_many("t", ["b"] * 5, delay=30 * 60 + 30)   # bucket 30 (mid-bucket: the read comes a little later)
    dq.publish("t", "c", at=_at(now + 2 * 3600_000))   # beyond an hour: later
    dq.publish("t", "ready now")                       # ready: already due, not in the forecast
    f = dq.due_forecast("t", horizon=3600, bucket=60)
    assert isinstance(f, DueForecast) and f.bucket_ms == 60_000 and len(f.counts) == 60
    assert now <= f.start_ms <= server_ms(dq)
    assert f.counts[1] == 3 and f.counts[30] == 5 and sum(f.counts) == 8
    assert (f.overdue, f.later, f.held) == (0, 1, 0) and f.total == 9
    assert f.peaks(2) == [1, 30] and f.peaks(1) == [30]


def test_due_forecast_includes_retries_and_holds_and_reads_each_group(dq):
    dq.configure_group("t", "default", ordered=True, retry=RetryPolicy.fixed(150))
    dq.configure_group("t", "other", ordered=True)
    mid = dq.publish("t", "x")
    dq.nack(dq.claim("t")[0], "boom")                 # retrying, due in 150 s: bucket 2
    dq.publish("t", "k1", order_key="k", delay=630)   # the key's head: bucket 10
    dq.publish("t", "k2", order_key="k", delay=630)   # held behind it
    f = dq.due_forecast("t", bucket=60)
    assert f.counts[2] == 1 and f.counts[10] == 1 and f.held == 1
    other = dq.due_forecast("t", group="other", bucket=60)
    # Group "other" never claimed x (it is ready there) and has the same head and held message.
    assert sum(other.counts) == 1 and other.held == 1
    assert dq.get("t", mid).state.value == "retrying"


def test_due_forecast_buckets_are_half_open_and_the_horizon_rounds_up(dq):
    f0 = dq.due_forecast("t", horizon=150, bucket=60)   # an empty topic
    assert len(f0.counts) == 3 and f0.total == 0
    start = server_ms(dq) + 60_000
    # Exactly on a bucket edge: the later bucket counts it, so no message is counted twice.
    dq.publish("t", "edge", at=_at(start + 120_000))
    f = dq.due_forecast("t", horizon=600, bucket=60)
    edge = start + 120_000
    i = (edge - f.start_ms) // f.bucket_ms
    assert f.counts[i] == 1 and sum(f.counts) == 1


def test_lateness_carries_what_one_bucket_cannot_drain_into_the_next():
    f = DueForecast(start_ms=0, bucket_ms=1000, counts=[300, 0, 0, 50], overdue=100, later=0, held=0)
    # 100 a second: 400 due by the end of second 0 leaves 300, then 200, 100, and 50 + 100 - 100 = 50.
    assert f.lateness(100) == [3.0, 2.0, 1.0, 0.5]
    assert f.lateness(0)[0] == math.inf
    assert DueForecast(0, 1000, [0, 5], 0, 0, 0).lateness(0) == [0.0, math.inf]


@pytest.mark.parametrize("kwargs, words", [
    ({"horizon": 7 * 86400 + 60, "bucket": 60}, "10,081 buckets"),
    ({"horizon": 3600, "bucket": 0}, "bucket must be at least 1 ms"),
    ({"horizon": 30, "bucket": 60}, "horizon at least one bucket"),
    ({"horizon": -5, "bucket": 60}, "horizon cannot be negative"),
])
def test_due_forecast_refuses_absurd_buckets_with_a_clear_error(dq, kwargs, words):
    with pytest.raises(InvalidArgument, match=words):
        dq.due_forecast("t", **kwargs)


def test_a_week_of_minutes_is_allowed(dq):
    dq.publish("t", "x", delay=3 * 86400)
    dq.configure_topic("t", max_delay=8 * 86400)
    f = dq.due_forecast("t", horizon=7 * 86400, bucket=60)
    assert len(f.counts) == 10_080 and sum(f.counts) == 1


def test_aligned_buckets_start_on_a_whole_bucket_and_the_first_counts_what_fell_due_in_it(dq):
    before = server_ms(dq)
    f = dq.due_forecast("t", horizon=3 * 3600, bucket=3600, align=True)
    assert f.start_ms % 3_600_000 == 0 and f.start_ms <= before < f.start_ms + 3_600_000
    dq.publish("t", "soon", at=_at(f.start_ms + 3_600_000 + 1))     # just into the second hour
    past = dq.publish("t", "past", delay=0.05)
    due = round(dq.get("t", past).due_at.timestamp() * 1000)
    poll(lambda: server_ms(dq) > due)                               # due, not yet promoted: still pending
    g = dq.due_forecast("t", horizon=3 * 3600, bucket=3600, align=True)
    assert g.counts[:2] == [1, 1] and g.overdue == 0
    assert dq.due_forecast("t", horizon=3 * 3600, bucket=3600).overdue == 1   # unaligned: before now


@pytest.mark.parametrize("kwargs", [{"horizon": math.inf}, {"horizon": math.nan}, {"bucket": math.nan},
                                    {"bucket": math.inf}])
def test_finding_due_forecast_refuses_non_finite_horizon_and_bucket(dq, kwargs):
    with pytest.raises(InvalidArgument, match="finite number of seconds"):
        dq.due_forecast("t", **kwargs)


def test_finding_due_forecast_reads_a_week_of_minutes_over_many_sets(dq):
    # A week of minutes over every non-empty set: runs of FORECAST_BUCKETS_PER_CALL buckets a script call.
    dq.publish_many("t", [str(i) for i in range(20)], delay=3 * 86_400)
    f = dq.due_forecast("t", horizon=7 * 86_400, bucket=60)
    assert len(f.counts) == 10_080 and sum(f.counts) == 20 and f.total == 20


def test_due_forecast_runs_of_buckets_meet_without_gaps_or_double_counts(dq):
    # 2,500 one-second buckets are several script calls (runs of FORECAST_BUCKETS_PER_CALL): a
    # message due on either side of each edge between runs is counted once, in its own bucket.
    start = server_ms(dq) + 5_000
    start -= start % 1000
    run = FORECAST_BUCKETS_PER_CALL
    edges = [0, run - 1, run, 2 * run - 1, 2 * run, 2499]
    for b in edges:
        dq.publish("t", f"b{b}", at=_at(start + b * 1000 + 500))
    dq.publish("t", "after", at=_at(start + 2500 * 1000 + 500))
    dq.configure_group("t", "default", ordered=True)
    dq.publish("t", "k1", order_key="k", at=_at(start + 100 * 1000 + 500))
    dq.publish("t", "k2", order_key="k", at=_at(start + 100 * 1000 + 500))   # held behind k1
    f = dq.due_forecast("t", horizon=2500, bucket=1, align=True)
    shift = (start - f.start_ms) // 1000   # the read starts on a whole second a few seconds before
    assert len(f.counts) == 2500 and f.overdue == 0
    assert {i - shift: c for i, c in enumerate(f.counts) if c} == {**{b: 1 for b in edges if b + shift < 2500}, 100: 1}
    assert f.held == 1 and f.later == 1 + sum(1 for b in edges if b + shift >= 2500)
    assert f.total == 9 and 2 * run < 2499
