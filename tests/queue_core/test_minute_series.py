"""minute_series and summaries(series=True): the per-minute counters the console charts, read for
many groups at once from the groups' minutes hashes."""

import pytest

from queue_core import InvalidArgument, RetryPolicy


def _settled(dq, topic):
    """Publish 5, claim 3, ack 2 and nack 1 into the dead set (one attempt allowed); the minutes
    of Redis's clock before and after, so a minute boundary crossed meanwhile is accounted for."""
    dq.configure_topic(topic, retry=RetryPolicy.fixed(0, max_attempts=1))
    start = dq.server_ms() // 60_000
    dq.publish_many(topic, [b"x"] * 5)
    first, second, third = dq.claim(topic, 3)
    dq.ack(first)
    dq.ack(second)
    dq.nack(third, "boom")
    return start


def _in_window(values, series, start, end):
    """The values of the minutes start..end of a series, and whether every other minute is empty."""
    first = series["first_minute"]
    inside = values[start - first:end - first + 1]
    outside = values[:start - first] + values[end - first + 1:]
    return inside, all(not v for v in outside)


def test_finding_no_live_charts_minute_series_counts_each_event_per_minute(dq):
    """The batched series read gives, per minute, exactly what was published, acked and dead-lettered,
    and the claims' lateness, for every group asked about, in one call."""
    start = _settled(dq, "charted")
    dq.publish("quiet", b"y")
    got = dq.minute_series([("charted", "default"), ("quiet", "default"), ("charted", "nobody")])
    series = got[("charted", "default")]
    end = series["now_ms"] // 60_000
    assert series["first_minute"] == end - 59
    for event, expected in (("published", 5), ("acked", 2), ("dead", 1), ("deliveries", 3)):
        assert len(series[event]) == 60, event
        inside, rest_empty = _in_window(series[event], series, start, end)
        assert sum(inside) == expected and rest_empty, (event, inside)
        if start == end:    # the usual case: everything happened in the current minute
            assert series[event][-1] == expected, event
    for p50, p99, n in zip(series["p50_ms"], series["p99_ms"], series["deliveries"], strict=True):
        assert (p50 is None and p99 is None) if not n else (0 < p50 <= p99), (p50, p99, n)
    quiet = got[("quiet", "default")]
    assert sum(quiet["published"]) == 1 and not any(quiet["acked"] + quiet["dead"] + quiet["deliveries"])
    assert not any(got[("charted", "nobody")]["published"])


def test_summaries_series_match_minute_series(dq):
    """The overview's sparklines come from summaries(series=True): the same counts minute_series
    reads, in the summaries' one pipeline; without series, no per_minute and no published counter."""
    start = _settled(dq, "charted")
    pair = ("charted", "default")
    summary = dq.summaries([pair], series=True)[pair]
    series = dq.minute_series([pair])[pair]
    if start == series["now_ms"] // 60_000 == summary["now_ms"] // 60_000:
        for event in ("published", "acked", "dead"):
            assert summary["per_minute"][event] == series[event], event
    assert [len(summary["per_minute"][e]) for e in ("published", "acked", "dead")] == [60, 60, 60]
    assert sum(summary["per_minute"]["published"]) == 5
    plain = dq.summaries([pair])[pair]
    assert "per_minute" not in plain and "published_last_hour" not in plain


@pytest.mark.parametrize("minutes", [0, 61])
def test_minute_series_outside_the_hour_kept_is_refused(dq, minutes):
    with pytest.raises(InvalidArgument, match="between 1 and 60"):
        dq.minute_series([("t", "default")], minutes=minutes)
