"""stats() and snapshot() (the metrics scrape's read) on groups that dispatch limits use: the
stats hash holds the rate bucket beside the counters, and the counters gain "throttled:<reason>"."""

import pytest

pytestmark = pytest.mark.single_partition


def test_stats_and_snapshot_read_a_rate_limited_groups_counters(dq):
    dq.configure_topic("t")
    dq.configure_group("t", "default", rate=(2, 60.0), max_in_flight_per_key=5)
    dq.publish_many("t", ["x"] * 5, fairness_key="acme")
    assert len(dq.claim("t", 5)) == 1          # a burst of one: 2/60 s refills slowly
    stats = dq.stats("t")
    assert stats["claimed"] == 1 and stats["throttled:rate"] == 1
    assert "rate" not in stats and "ffill" not in stats
    _, snap = dq.snapshot([("t", "default")])
    assert snap[("t", "default")]["stats"] == stats
