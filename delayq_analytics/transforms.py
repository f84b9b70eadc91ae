"""Pure transforms: archived events (the schema in delayq_analytics.schema) -> analytics frames.

No I/O here: each function takes DataFrames and returns one, so tests feed small inline frames
and compare with expected frames built by hand. Definitions, shared with the dashboard's labels:

- delivered: a first claim (attempt 1, which includes the first claim after a replay);
  redelivered: a claim with attempt > 1 (a retry, or a lease that expired).
- retried: a failure (nacked, or a lease expired) whose next state is ``retrying``.
- lateness: claim time - due time of first attempts; handler time: ack/nack/reject time - claim
  time. Percentiles are nearest-rank (the smallest value with at least q of the values at or
  below it), exact for values under 1,000 ms; larger values are rounded to 3 significant digits
  first (at most 0.05 % off), which keeps the histograms small.
- error groups: ``dead`` events by fingerprint. A death counts as replayed when a ``replayed``
  event for that message (in the same consumer group) follows it; the replay succeeded when the
  message's next ``acked`` or ``dead`` event in that group after that replay is ``acked``.
- groups: every output is per (topic, consumer group), with ``*`` rollups: (topic, ``*``) sums a
  topic's groups, (``*``, ``*``) all topics (timings and attempts). A ``published`` event belongs
  to the topic, not to one group (every group of the moment received it), so ``published`` is
  counted on the (topic, ``*``) rows only; events archived before groups existed count as the
  ``default`` group.

How 10M events stay fast on two cores: the per-minute figures come from one "cube" (topic, group,
minute, kind of event, value, attempt -> count) built in one shuffle of narrow rows, in which
duplicates are also dropped. Counts, percentile histograms, the across-topics rollup and the
attempts histogram are all small aggregations of the cube.
"""

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .counts import COUNT_COLUMNS

ALL_TOPICS = "*"    # not a legal topic name (they start with a letter or digit): safe as a rollup key
ALL_GROUPS = "*"    # nor a legal group name
DEFAULT_GROUP = "default"
QUANTILES = (0.5, 0.95, 0.99)
EXACT_BELOW_MS = 1_000
SAMPLE_IDS = 5

# COUNT_COLUMNS entry -> the cube kinds it sums (kinds: see event_kind()).
KINDS = {
    "published": ("published",),
    "delivered": ("claimed:first",),
    "redelivered": ("claimed:again",),
    "acked": ("acked",),
    "nacked": ("nacked:retrying", "nacked:dead"),
    "rejected": ("rejected",),
    "expired": ("expired:retrying", "expired:dead"),
    "retried": ("nacked:retrying", "expired:retrying"),
    "dead_lettered": ("dead",),
    "replayed": ("replayed",),
    "evicted": ("evicted",),
    "cancelled": ("cancelled",),
    "deleted": ("deleted",),
}
assert tuple(KINDS) == COUNT_COLUMNS
# measure -> the kinds that carry it and the column it is read from
MEASURES = {
    "lateness": (("claimed:first",), "lateness_ms"),
    "handler": (("acked", "nacked:retrying", "nacked:dead", "rejected"), "handler_ms"),
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


def group_of() -> Column:
    """The event's consumer group: ``*`` for ``published`` (the topic's), ``default`` for events
    archived before groups existed (null)."""
    return (F.when(F.col("event") == "published", F.lit(ALL_GROUPS))
            .otherwise(F.coalesce(F.col("group"), F.lit(DEFAULT_GROUP))))


def _minute(ts: Column) -> Column:
    return F.timestamp_millis(ts - ts % 60_000)


def event_kind() -> Column:
    """The event name, qualified where the counts need it: claimed:first / claimed:again,
    nacked:<next state>, expired:<next state>."""
    event = F.col("event")
    qualifier = (F.when(event == "claimed", F.when(F.col("attempt") == 1, "first").otherwise("again"))
                 .when(event.isin("nacked", "expired"), F.col("next")))
    return F.concat_ws(":", event, qualifier)


def bucket(value: Column) -> Column:
    """Exact under EXACT_BELOW_MS; above, rounded to 3 significant digits."""
    scale = F.pow(F.lit(10.0), F.floor(F.log10(value)) - 2)
    return F.when(value < EXACT_BELOW_MS, value).otherwise((F.round(value / scale) * scale).cast("long"))


def minute_cube(events: DataFrame) -> DataFrame:
    """(topic, group, minute, kind, value, attempt) -> n events, copies (n before de-duplication).

    ``value`` is the event's measure (lateness of first claims, handler time of acks and
    failures, bucketed), ``attempt`` is kept for acks only. Duplicates of an event share its ts,
    hence its minute: after hash-partitioning by minute, both the de-duplication and the
    aggregation run inside each partition, so the only exchange carries five narrow columns."""
    kind = event_kind()
    value = F.lit(None).cast("long")
    for kinds, column in MEASURES.values():
        value = F.when(kind.isin(*kinds) & F.col(column).isNotNull(), bucket(F.col(column))).otherwise(value)
    narrow = events.select("topic", group_of().alias("group"), "event_id", _minute(F.col("ts")).alias("minute"),
                           kind.alias("kind"), value.alias("value"),
                           F.when(F.col("event") == "acked", F.col("attempt")).alias("attempt"))
    once = (narrow.repartition("minute")
            .groupBy("minute", "topic", "group", "event_id", "kind", "value", "attempt")
            .agg(F.count("*").alias("copies")))
    return once.groupBy("topic", "group", "minute", "kind", "value", "attempt").agg(
        F.count("*").alias("n"), F.sum("copies").alias("copies"))


def counts_of(cube: DataFrame) -> DataFrame:
    """Per topic and group per minute, and per topic over its groups (group ``*``, where
    ``published`` is counted): one column per COUNT_COLUMNS entry."""
    sums = [F.sum(F.when(F.col("kind").isin(*kinds), F.col("n")).otherwise(0)).cast("long").alias(name)
            for name, kinds in KINDS.items()]
    per_group = cube.where(F.col("group") != ALL_GROUPS).groupBy("topic", "group", "minute").agg(*sums)
    per_topic = cube.groupBy("topic", "minute").agg(*sums).withColumn("group", F.lit(ALL_GROUPS))
    return per_group.unionByName(per_topic).withColumn("date", F.to_date("minute"))


def timings_of(cube: DataFrame) -> DataFrame:
    """Per topic and group (and ``*`` rollups: a topic's groups, all topics) per minute per
    measure (lateness, handler): count, p50, p95, p99 (nearest rank, see the module docstring)
    and max, in milliseconds."""
    measure = F.lit(None).cast("string")
    for name, (kinds, _column) in MEASURES.items():
        measure = F.when(F.col("kind").isin(*kinds), F.lit(name)).otherwise(measure)
    hist = (cube.where(F.col("value").isNotNull()).withColumn("measure", measure)
            .groupBy("topic", "group", "minute", "measure", "value").agg(F.sum("n").alias("n")))
    per_topic = (hist.groupBy("topic", "minute", "measure", "value").agg(F.sum("n").alias("n"))
                 .withColumn("group", F.lit(ALL_GROUPS)))
    across = (per_topic.groupBy("minute", "measure", "value").agg(F.sum("n").alias("n"))
              .withColumn("topic", F.lit(ALL_TOPICS)).withColumn("group", F.lit(ALL_GROUPS)))
    hist = hist.unionByName(per_topic).unionByName(across)
    group = ["topic", "group", "minute", "measure"]
    running = Window.partitionBy(*group).orderBy("value").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    hist = (hist.withColumn("cum", F.sum("n").over(running))
            .withColumn("total", F.sum("n").over(Window.partitionBy(*group))))

    def nearest_rank(q):
        return F.min(F.when(F.col("cum") >= F.greatest(F.lit(1), F.ceil(F.col("total") * q)), F.col("value")))
    return (hist.groupBy(*group)
            .agg(F.max("total").alias("count"), *[nearest_rank(q).alias(f"p{round(q * 100)}") for q in QUANTILES],
                 F.max("value").alias("max"))
            .withColumn("date", F.to_date("minute")))


def attempts_of(cube: DataFrame) -> DataFrame:
    """How many attempts acked messages needed: topic and group (and the ``*`` rollups), attempt,
    messages."""
    acked = cube.where(F.col("kind") == "acked")
    per_group = acked.groupBy("topic", "group", "attempt").agg(F.sum("n").alias("messages"))
    per_topic = (acked.groupBy("topic", "attempt").agg(F.sum("n").alias("messages"))
                 .withColumn("group", F.lit(ALL_GROUPS)))
    across = (acked.groupBy("attempt").agg(F.sum("n").alias("messages"))
              .withColumn("topic", F.lit(ALL_TOPICS)).withColumn("group", F.lit(ALL_GROUPS)))
    return per_group.unionByName(per_topic).unionByName(across)


def minute_counts(events: DataFrame) -> DataFrame:
    return counts_of(minute_cube(events))


def timings(events: DataFrame) -> DataFrame:
    return timings_of(minute_cube(events))


def attempts(events: DataFrame) -> DataFrame:
    return attempts_of(minute_cube(events))


def error_groups(events: DataFrame) -> DataFrame:
    """Dead letters by (topic, group, fingerprint), and by (topic, fingerprint) over the groups as
    group ``*``: deaths, first/last seen, sample ids, replays and successful replays (definitions
    in the module docstring). Reads only dead and replayed events and the acks of messages that
    died (a small share), de-duplicating just those."""
    # Dead and replayed events are a small share of all events; the acks that matter are those of
    # messages that died, found by a broadcast semi-join (no shuffle of the acks).
    keys = ["topic", "group", "msg"]
    events = events.withColumn("group", group_of())
    died_or_replayed = events.where(F.col("event").isin("dead", "replayed")).localCheckpoint()
    died = F.broadcast(died_or_replayed.where(F.col("event") == "dead").select(*keys).distinct())
    acks = events.where(F.col("event") == "acked").join(died, keys, "left_semi")
    # Materialised once: deaths, replays and ends below each read it.
    events = dedupe(died_or_replayed.unionByName(acks)).localCheckpoint()
    deaths = (events.where(F.col("event") == "dead")
              .select(*keys, "fp", F.col("ts").alias("dead_ts"), F.col("event_id").alias("death_id")))
    replays = events.where(F.col("event") == "replayed").select(*keys, F.col("ts").alias("replay_ts"))
    ends = (events.where(F.col("event").isin("acked", "dead"))
            .select(*keys, F.col("ts").alias("end_ts"), F.col("event_id").alias("end_id"),
                    F.col("event").alias("end_event")))
    replays = replays.join(died, keys, "left_semi")

    def same(left, right):
        return (F.col(f"{left}.topic") == F.col(f"{right}.topic")) & (F.col(f"{left}.group") == F.col(f"{right}.group")) \
            & (F.col(f"{left}.msg") == F.col(f"{right}.msg"))

    # Conditions sit in the join (not a filter after it) so a death with no match keeps its row.
    d, r = deaths.alias("d"), replays.alias("r")
    first_replay = (d.join(r, same("d", "r") & (F.col("r.replay_ts") >= F.col("d.dead_ts")), "left")
                    .groupBy("d.topic", "d.group", "d.msg", "d.fp", "d.dead_ts", "d.death_id")
                    .agg(F.min("r.replay_ts").alias("replay_ts")))
    f, e = first_replay.alias("f"), ends.alias("e")
    after = f.join(e, same("f", "e") & (F.col("e.end_ts") > F.col("f.replay_ts")), "left")
    first_end = Window.partitionBy("f.topic", "f.death_id").orderBy(F.col("e.end_ts").asc_nulls_last(), "e.end_id")
    outcome = (after.withColumn("rank", F.row_number().over(first_end)).where(F.col("rank") == 1)
               .select("f.topic", "f.group", "f.msg", "f.fp", "f.dead_ts",
                       F.col("f.replay_ts").isNotNull().alias("was_replayed"),
                       F.coalesce(F.col("e.end_event") == "acked", F.lit(False)).alias("replay_succeeded")))
    samples = F.slice(F.array_sort(F.collect_list(F.struct("dead_ts", "msg"))), 1, SAMPLE_IDS)
    figures = [F.count("*").alias("dead"),
               F.timestamp_millis(F.min("dead_ts")).alias("first_seen"),
               F.timestamp_millis(F.max("dead_ts")).alias("last_seen"),
               F.transform(samples, lambda s: s["msg"]).alias("sample_ids"),
               F.sum(F.col("was_replayed").cast("long")).alias("replayed"),
               F.sum(F.col("replay_succeeded").cast("long")).alias("replay_succeeded")]
    per_group = outcome.groupBy("topic", "group", "fp").agg(*figures)
    per_topic = outcome.groupBy("topic", "fp").agg(*figures).withColumn("group", F.lit(ALL_GROUPS))
    return (per_group.unionByName(per_topic)
            .withColumn("replayed_share", F.col("replayed") / F.col("dead"))
            .withColumn("replay_success_share",
                        F.when(F.col("replayed") > 0, F.col("replay_succeeded") / F.col("replayed"))))
