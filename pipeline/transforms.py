"""Pure transforms: archived events (the schema in pipeline.schema) -> analytics frames.

No I/O here: each function takes DataFrames and returns one, so tests feed small inline frames
and compare with expected frames built by hand. Definitions, shared with the dashboard's labels:

- delivered: a first claim (attempt 1, which includes the first claim after a replay);
  redelivered: a claim with attempt > 1 (a retry, or a lease that expired).
- retried: a failure (nacked, or a lease expired) whose next state is ``retrying``.
- lateness: claim time - due time of first attempts; handler time: ack/nack time - claim time.
- error groups: ``dead`` events by fingerprint. A death counts as replayed when a ``replayed``
  event for that message follows it; the replay succeeded when the message's next ``acked`` or
  ``dead`` event after that replay is ``acked``.
"""

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .counts import COUNT_COLUMNS  # noqa: F401  (re-exported: the columns, in order)

ALL_TOPICS = "*"    # not a legal topic name (they start with a letter or digit): safe as a rollup key
QUANTILES = (0.5, 0.95, 0.99)
PERCENTILE_ACCURACY = 10_000   # relative error ~1/10,000 of the rank (measured in bench/pipeline.py)
SAMPLE_IDS = 5


def count_conditions() -> dict[str, Column]:
    """Column name -> which events it counts (a function: Columns need an active Spark)."""
    return {
        "published": F.col("event") == "published",
        "delivered": (F.col("event") == "claimed") & (F.col("attempt") == 1),
        "redelivered": (F.col("event") == "claimed") & (F.col("attempt") > 1),
        "acked": F.col("event") == "acked",
        "nacked": F.col("event") == "nacked",
        "rejected": F.col("event") == "rejected",
        "expired": F.col("event") == "expired",
        "retried": F.col("event").isin("nacked", "expired") & (F.col("next") == "retrying"),
        "dead_lettered": F.col("event") == "dead",
        "replayed": F.col("event") == "replayed",
        "evicted": F.col("event") == "evicted",
        "cancelled": F.col("event") == "cancelled",
        "deleted": F.col("event") == "deleted",
    }




def dedupe(events: DataFrame) -> DataFrame:
    """At-least-once archiving can store an event twice; (topic, event_id) is unique."""
    return events.dropDuplicates(["topic", "event_id"])


def in_window(events: DataFrame, since_ms: int | None, until_ms: int | None) -> DataFrame:
    if since_ms is not None:
        events = events.where(F.col("ts") >= since_ms)
    if until_ms is not None:
        events = events.where(F.col("ts") < until_ms)
    return events


def _minute(ts: Column) -> Column:
    return F.timestamp_millis(ts - ts % 60_000)


def minute_counts(events: DataFrame) -> DataFrame:
    """Per topic per minute: one column per COUNT_COLUMNS entry."""
    sums = [F.sum(F.when(cond, 1).otherwise(0)).cast("long").alias(name) for name, cond in count_conditions().items()]
    return (events.withColumn("minute", _minute(F.col("ts")))
            .groupBy("topic", "minute").agg(*sums)
            .withColumn("date", F.to_date("minute")))


def _with_rollup(frame: DataFrame) -> DataFrame:
    return frame.unionByName(frame.withColumn("topic", F.lit(ALL_TOPICS)))


def timings(events: DataFrame) -> DataFrame:
    """Per topic (and across topics as ``*``) per minute, for ``measure`` lateness and handler:
    count, p50, p95, p99 (approximate, see PERCENTILE_ACCURACY) and max, in milliseconds."""
    lateness = (events.where((F.col("event") == "claimed") & (F.col("attempt") == 1) & F.col("lateness_ms").isNotNull())
                .select("topic", "ts", F.lit("lateness").alias("measure"), F.col("lateness_ms").alias("value")))
    handler = (events.where(F.col("event").isin("acked", "nacked", "rejected") & F.col("handler_ms").isNotNull())
               .select("topic", "ts", F.lit("handler").alias("measure"), F.col("handler_ms").alias("value")))
    values = _with_rollup(lateness.unionByName(handler)).withColumn("minute", _minute(F.col("ts")))
    pct = F.percentile_approx("value", list(QUANTILES), PERCENTILE_ACCURACY)
    return (values.groupBy("topic", "minute", "measure")
            .agg(F.count("*").alias("count"), pct.alias("pct"), F.max("value").alias("max"))
            .select("topic", "minute", "measure", "count", F.col("pct")[0].alias("p50"), F.col("pct")[1].alias("p95"),
                    F.col("pct")[2].alias("p99"), "max")
            .withColumn("date", F.to_date("minute")))


def attempts(events: DataFrame) -> DataFrame:
    """How many attempts acked messages needed: topic (and ``*``), attempts, messages."""
    acked = events.where(F.col("event") == "acked").select("topic", "attempt")
    return (_with_rollup(acked).groupBy("topic", "attempt").agg(F.count("*").alias("messages")))


def error_groups(events: DataFrame) -> DataFrame:
    """Dead letters by (topic, fingerprint): deaths, first/last seen, sample ids, replays and
    successful replays (definitions in the module docstring)."""
    deaths = (events.where(F.col("event") == "dead")
              .select("topic", "msg", "fp", F.col("ts").alias("dead_ts"), F.col("event_id").alias("death_id")))
    replays = events.where(F.col("event") == "replayed").select("topic", "msg", F.col("ts").alias("replay_ts"))
    ends = (events.where(F.col("event").isin("acked", "dead"))
            .select("topic", "msg", F.col("ts").alias("end_ts"), F.col("event_id").alias("end_id"),
                    F.col("event").alias("end_event")))
    # Only messages that died matter: shrink both sides before the joins.
    died = deaths.select("topic", "msg").distinct()
    replays = replays.join(died, ["topic", "msg"], "left_semi")
    ends = ends.join(died, ["topic", "msg"], "left_semi")

    # Conditions sit in the join (not a filter after it) so a death with no match keeps its row.
    d, r = deaths.alias("d"), replays.alias("r")
    first_replay = (d.join(r, (F.col("d.topic") == F.col("r.topic")) & (F.col("d.msg") == F.col("r.msg"))
                           & (F.col("r.replay_ts") >= F.col("d.dead_ts")), "left")
                    .groupBy("d.topic", "d.msg", "d.fp", "d.dead_ts", "d.death_id")
                    .agg(F.min("r.replay_ts").alias("replay_ts")))
    f, e = first_replay.alias("f"), ends.alias("e")
    after = f.join(e, (F.col("f.topic") == F.col("e.topic")) & (F.col("f.msg") == F.col("e.msg"))
                   & (F.col("e.end_ts") > F.col("f.replay_ts")), "left")
    first_end = Window.partitionBy("f.topic", "f.death_id").orderBy(F.col("e.end_ts").asc_nulls_last(), "e.end_id")
    outcome = (after.withColumn("rank", F.row_number().over(first_end)).where(F.col("rank") == 1)
               .select("f.topic", "f.msg", "f.fp", "f.dead_ts",
                       F.col("f.replay_ts").isNotNull().alias("was_replayed"),
                       F.coalesce(F.col("e.end_event") == "acked", F.lit(False)).alias("replay_succeeded")))
    samples = F.slice(F.array_sort(F.collect_list(F.struct("dead_ts", "msg"))), 1, SAMPLE_IDS)
    return (outcome.groupBy("topic", "fp")
            .agg(F.count("*").alias("dead"),
                 F.timestamp_millis(F.min("dead_ts")).alias("first_seen"),
                 F.timestamp_millis(F.max("dead_ts")).alias("last_seen"),
                 F.transform(samples, lambda s: s["msg"]).alias("sample_ids"),
                 F.sum(F.col("was_replayed").cast("long")).alias("replayed"),
                 F.sum(F.col("replay_succeeded").cast("long")).alias("replay_succeeded"))
            .withColumn("replayed_share", F.col("replayed") / F.col("dead"))
            .withColumn("replay_success_share",
                        F.when(F.col("replayed") > 0, F.col("replay_succeeded") / F.col("replayed"))))
