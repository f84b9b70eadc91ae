"""Each transform on a small inline frame, against an expected frame written out by hand."""

import json
from datetime import UTC, date, datetime

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from delayq_analytics import transforms
from delayq_analytics.schema import spark_schema

M = 60_000
T0 = 1_790_000_040_000          # 2026-09-21 ... a whole minute
D = date(2026, 9, 21)


def utc(ms):
    """Spark hands timestamps back as naive datetimes in the session's time zone (UTC)."""
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def minute(n):
    return utc(T0 + n * M)


def ev(event_id, event, msg, ts, topic="orders", attempt=None, lateness_ms=None, handler_ms=None, fp=None,
       next=None, group="default"):
    return {"event_id": event_id, "event": event, "msg": msg, "ts": ts, "attempt": attempt, "due": None,
            "lateness_ms": lateness_ms, "handler_ms": handler_ms, "fp": fp, "next": next, "actor": "t",
            "from_state": None, "reason": None, "meta": None, "payload": None, "extra": None,
            "group": None if event == "published" else group, "partition": 0, "date": D, "topic": topic}


def frame(spark, rows):
    return spark.createDataFrame([Row(**r) for r in rows], spark_schema())


def test_error_groups_count_events_archived_twice_once(spark):
    # At-least-once archiving can store an event twice: (topic, event_id) identifies it.
    death, replay, ack = (ev("1-0", "dead", "a", T0, fp="f1"), ev("2-0", "replayed", "a", T0 + 5),
                          ev("3-0", "acked", "a", T0 + 9, attempt=1))
    out = transforms.error_groups(frame(spark, [death, death, replay, replay, ack, ack]))
    assertDataFrameEqual(out.where("group = 'default'").select("dead", "replayed", "replay_succeeded"),
                         [Row(dead=1, replayed=1, replay_succeeded=1)])


def test_only_events_that_may_repeat_are_deduplicated(spark):
    # The job de-duplicates the events of overlapping files only (delayq_analytics.files); the
    # other files' events are counted as they are, in cells that may be split over two rows.
    copy = ev("1-0", "claimed", "a", T0 + 1, attempt=1, lateness_ms=4)
    rows = frame(spark, [copy, ev("2-0", "claimed", "b", T0 + 2, attempt=1, lateness_ms=4)]).withColumn(
        "_file", F.lit("x")).unionByName(frame(spark, [copy]).withColumn("_file", F.lit("y")))
    again = ev("3-0", "claimed", "c", T0 + 3, attempt=1, lateness_ms=4)
    rows = rows.unionByName(frame(spark, [again, again]).withColumn("_file", F.lit("z")))
    cube = transforms.minute_cube(rows, F.col("_file").isin("x", "y"))
    assert cube.where("n > 0").count() == 2       # the one cell, once from x and y, once from z
    totals = cube.agg(F.sum("n"), F.sum("copies")).first()
    # a once (two copies), b once, c twice: z's events were not said to repeat
    assert tuple(totals) == (4, 5)
    counts = transforms.counts_of(cube).where("group = 'default'").select("delivered").first()
    timings = transforms.timings_of(cube).where("group = 'default'").select("count", "p50").first()
    assert (counts["delivered"], timings["count"], timings["p50"]) == (4, 4, 4)
    assert tuple(transforms.minute_cube(rows, True).agg(F.sum("n"), F.sum("copies")).first()) == (3, 5)
    assert tuple(transforms.minute_cube(rows, False).agg(F.sum("n"), F.sum("copies")).first()) == (5, 5)


def test_minute_counts(spark):
    rows = [
        ev("1-0", "published", "a", T0), ev("1-1", "published", "b", T0 + 10),
        ev("2-0", "claimed", "a", T0 + 20, attempt=1, lateness_ms=3),
        ev("3-0", "nacked", "a", T0 + 30, attempt=1, handler_ms=7, fp="f1", next="retrying"),
        ev("4-0", "claimed", "a", T0 + M + 1, attempt=2, lateness_ms=1),
        ev("5-0", "expired", "a", T0 + M + 2, attempt=2, next="dead"),
        ev("5-1", "dead", "a", T0 + M + 2, attempt=2, fp="f1"),
        ev("6-0", "replayed", "a", T0 + M + 3, attempt=0),
        ev("7-0", "acked", "b", T0 + M + 4, attempt=1, handler_ms=2),
        ev("8-0", "evicted", "c", T0 + M + 5), ev("9-0", "cancelled", "d", T0 + M + 6),
        ev("9-1", "deleted", "e", T0 + M + 7), ev("9-2", "rejected", "f", T0 + M + 8, next="dead"),
        ev("1-0", "published", "x", T0 + 2 * M, topic="emails"),
        ev("1-0", "published", "x", T0 + 2 * M, topic="emails"),       # archived twice: counted once
    ]
    zero = dict.fromkeys(transforms.COUNT_COLUMNS, 0)
    minute_1 = {"redelivered": 1, "expired": 1, "dead_lettered": 1, "replayed": 1, "acked": 1, "evicted": 1,
                "cancelled": 1, "deleted": 1, "rejected": 1}
    expected = [
        # the default group's rows: everything but published, which is the topic's (group *)
        Row(**{"topic": "orders", "group": "default", "minute": minute(0), **zero, "delivered": 1, "nacked": 1,
               "retried": 1, "date": D}),
        Row(**{"topic": "orders", "group": "default", "minute": minute(1), **zero, **minute_1, "date": D}),
        Row(**{"topic": "orders", "group": "*", "minute": minute(0), **zero, "published": 2, "delivered": 1,
               "nacked": 1, "retried": 1, "date": D}),
        Row(**{"topic": "orders", "group": "*", "minute": minute(1), **zero, **minute_1, "date": D}),
        Row(**{"topic": "emails", "group": "*", "minute": minute(2), **zero, "published": 1, "date": D}),
    ]
    out = transforms.minute_counts(frame(spark, rows))
    assertDataFrameEqual(out.select(*expected[0].__fields__), expected)


def test_timings_percentiles_per_minute_with_rollup(spark):
    # 100 first-attempt claims in minute 0 with lateness 1..100 ms; retries' lateness is ignored.
    rows = [ev(f"{i}-0", "claimed", f"m{i}", T0 + i, attempt=1, lateness_ms=i) for i in range(1, 101)]
    rows += [ev("500-0", "claimed", "m1", T0 + 500, attempt=2, lateness_ms=9999)]
    rows += [ev("50-0", "claimed", "m50", T0 + 50, attempt=1, lateness_ms=50)]    # a duplicate: once
    rows += [ev("600-0", "acked", "m1", T0 + M, attempt=1, handler_ms=40),
             ev("601-0", "nacked", "m2", T0 + M + 1, attempt=1, handler_ms=60, next="retrying"),
             ev("602-0", "acked", "m3", T0 + M + 2, attempt=1, handler_ms=None)]
    expected = []
    for topic, group in (("orders", "default"), ("orders", "*"), ("*", "*")):
        expected += [Row(topic=topic, group=group, minute=minute(0), measure="lateness", count=100, p50=50, p95=95,
                         p99=99, max=100, date=D),
                     Row(topic=topic, group=group, minute=minute(1), measure="handler", count=2, p50=40, p95=60,
                         p99=60, max=60, date=D)]
    assertDataFrameEqual(transforms.timings(frame(spark, rows)), expected)


def test_attempts_histogram(spark):
    rows = [ev("1-0", "acked", "a", T0, attempt=1), ev("2-0", "acked", "b", T0, attempt=1),
            ev("3-0", "acked", "c", T0, attempt=3), ev("4-0", "acked", "d", T0, attempt=1, topic="emails"),
            ev("5-0", "nacked", "e", T0, attempt=1)]
    expected = [Row(topic=t, group=g, attempt=a, messages=n) for t, g, a, n in (
        ("orders", "default", 1, 2), ("orders", "default", 3, 1), ("emails", "default", 1, 1),
        ("orders", "*", 1, 2), ("orders", "*", 3, 1), ("emails", "*", 1, 1), ("*", "*", 1, 3), ("*", "*", 3, 1))]
    assertDataFrameEqual(transforms.attempts(frame(spark, rows)), expected)


def test_error_groups_with_replay_outcomes(spark):
    rows = [
        # a: dies (f1), replayed, acked -> replay succeeded
        ev("1-0", "dead", "a", T0 + 10, fp="f1"), ev("2-0", "replayed", "a", T0 + 20),
        ev("3-0", "acked", "a", T0 + 30, attempt=1),
        # b: dies (f1), replayed, dies again (f1), never replayed again
        ev("1-1", "dead", "b", T0 + 11, fp="f1"), ev("2-1", "replayed", "b", T0 + 21),
        ev("4-0", "dead", "b", T0 + 40, fp="f1"),
        # c: dies (f1), not replayed; an old ack before its death changes nothing
        ev("0-5", "acked", "c", T0 + 1, attempt=1), ev("1-2", "dead", "c", T0 + 12, fp="f1"),
        # d: dies (f2) in another topic, replayed and acked
        ev("1-0", "dead", "d", T0 + 50, fp="f2", topic="emails"), ev("2-0", "replayed", "d", T0 + 60, topic="emails"),
        ev("3-0", "acked", "d", T0 + 70, attempt=1, topic="emails"),
    ]
    out = transforms.error_groups(frame(spark, rows))
    expected = []
    for group in ("default", "*"):
        expected += [
            Row(topic="orders", group=group, fp="f1", dead=4, first_seen=utc(T0 + 10),
                last_seen=utc(T0 + 40), sample_ids=["a", "b", "c", "b"], replayed=2,
                replay_succeeded=1, replayed_share=0.5, replay_success_share=0.5),
            Row(topic="emails", group=group, fp="f2", dead=1, first_seen=utc(T0 + 50),
                last_seen=utc(T0 + 50), sample_ids=["d"], replayed=1,
                replay_succeeded=1, replayed_share=1.0, replay_success_share=1.0),
        ]
    assertDataFrameEqual(out.select(*expected[0].__fields__), expected)


def test_groups_count_apart_and_roll_up_and_old_events_are_the_default_group(spark):
    rows = [
        ev("1-0", "published", "a", T0),                                         # the topic's, once
        ev("2-0", "claimed", "a", T0 + 1, attempt=1, lateness_ms=4),
        ev("2-1", "claimed", "a", T0 + 2, attempt=1, lateness_ms=8, group="billing"),
        ev("3-0", "acked", "a", T0 + 3, attempt=1, handler_ms=5),
        ev("3-1", "dead", "a", T0 + 4, attempt=1, fp="f9", group="billing"),
        # billing's replay of a is billing's: it does not make default's (nonexistent) death replayed
        ev("4-0", "replayed", "a", T0 + 5, group="billing"), ev("5-0", "acked", "a", T0 + 6, attempt=1,
                                                                 group="billing"),
        ev("6-0", "acked", "z", T0 + 7, attempt=2, group=None),                  # archived before groups
    ]
    df = frame(spark, rows)
    counts = {(r["group"], c): r[c] for r in transforms.minute_counts(df).collect()
              for c in ("published", "delivered", "acked", "dead_lettered", "replayed")}
    assert counts[("default", "delivered")] == 1 and counts[("billing", "delivered")] == 1
    assert counts[("default", "acked")] == 2 and counts[("billing", "acked")] == 1
    assert counts[("billing", "dead_lettered")] == 1 and counts[("default", "dead_lettered")] == 0
    assert counts[("default", "published")] == 0 and counts[("*", "published")] == 1
    assert counts[("*", "delivered")] == 2 and counts[("*", "acked")] == 3
    lateness = {(r["topic"], r["group"]): (r["count"], r["max"]) for r in transforms.timings(df).collect()
                if r["measure"] == "lateness"}
    assert lateness == {("orders", "default"): (1, 4), ("orders", "billing"): (1, 8), ("orders", "*"): (2, 8),
                        ("*", "*"): (2, 8)}
    errors = {r["group"]: (r["dead"], r["replayed"], r["replay_succeeded"])
              for r in transforms.error_groups(df).collect()}
    assert errors == {"billing": (1, 1, 1), "*": (1, 1, 1)}


@pytest.mark.parametrize("since,until,kept", [(None, None, 3), (T0 + 1, None, 2), (None, T0 + 2, 2),
                                              (T0 + 1, T0 + 2, 1)])
def test_window_is_half_open(spark, since, until, kept):
    rows = [ev(f"{i}-0", "published", "a", T0 + i) for i in range(3)]
    assert transforms.in_window(frame(spark, rows), since, until).count() == kept


def test_large_values_keep_three_significant_digits(spark):
    rows = [ev("1-0", "acked", "a", T0, attempt=1, handler_ms=999), ev("2-0", "acked", "b", T0, attempt=1,
                                                                      handler_ms=1_504),
            ev("3-0", "acked", "c", T0, attempt=1, handler_ms=123_456)]
    out = transforms.timings(frame(spark, rows)).where("topic = 'orders' and group = '*'").select("count", "p50", "p95", "max")
    assertDataFrameEqual(out, [Row(count=3, p50=1_500, p95=123_000, max=123_000)])


def test_late_causes_count_late_claims_by_cause_per_minute(spark):
    # The claim's cause travels in extra (queue_core/events.py: lateness_cause, late_behind); a
    # claim archived twice counts once; on-time claims and other events carry none.
    def late(event_id, msg, ts, cause, lateness, group="default", behind=None):
        row = ev(event_id, "claimed", msg, ts, attempt=1, lateness_ms=lateness, group=group)
        extra = {"lateness_cause": cause, **({"late_behind": behind} if behind else {})}
        row["extra"] = json.dumps(extra, sort_keys=True)
        return row
    held = late("1-0", "a", T0 + 5, "key_held", 900, behind="z")
    rows = [held, held, late("1-1", "b", T0 + 7, "no_worker", 40), late("2-0", "c", T0 + M + 1, "no_worker", 60),
            late("3-0", "d", T0 + 9, "no_worker", 20, group="audit"),
            ev("4-0", "claimed", "e", T0 + 3, attempt=1, lateness_ms=2), ev("5-0", "acked", "a", T0 + 8, attempt=1)]
    out = transforms.late_causes(frame(spark, rows)).select("topic", "group", "minute", "cause", "deliveries",
                                                            "max_ms", "date")
    expected = [Row(topic="orders", group="default", minute=minute(0), cause="key_held", deliveries=1, max_ms=900, date=D),
                Row(topic="orders", group="default", minute=minute(0), cause="no_worker", deliveries=1, max_ms=40, date=D),
                Row(topic="orders", group="default", minute=minute(1), cause="no_worker", deliveries=1, max_ms=60, date=D),
                Row(topic="orders", group="audit", minute=minute(0), cause="no_worker", deliveries=1, max_ms=20, date=D),
                Row(topic="orders", group="*", minute=minute(0), cause="key_held", deliveries=1, max_ms=900, date=D),
                Row(topic="orders", group="*", minute=minute(0), cause="no_worker", deliveries=2, max_ms=40, date=D),
                Row(topic="orders", group="*", minute=minute(1), cause="no_worker", deliveries=1, max_ms=60, date=D)]
    assertDataFrameEqual(out, expected)
