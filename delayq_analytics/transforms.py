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
minute, kind of event, value, attempt -> count) built in one pass over narrow rows, mostly
aggregated before Spark's shuffle; only events of files that may repeat others (see
delayq_analytics.files) go through de-duplication by event id. Counts, percentile histograms,
the across-topics rollup and the attempts histogram are all small aggregations of the cube.
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

# The kinds of event the cube counts (see event_kind()), coded as small numbers in the cube: the
# one pass over every event compares and hashes numbers, not strings.
CUBE_KINDS = ("published", "claimed:first", "claimed:again", "acked", "nacked:retrying", "nacked:dead", "rejected",
              "expired:retrying", "expired:dead", "dead", "replayed", "evicted", "cancelled", "deleted")
KIND_CODE = {name: code for code, name in enumerate(CUBE_KINDS)}
# COUNT_COLUMNS entry -> the cube kinds it sums.
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
assert {kind for kinds in KINDS.values() for kind in kinds} == set(CUBE_KINDS)
# measure -> the kinds that carry it and the column it is read from
MEASURES = {
    "lateness": (("claimed:first",), "lateness_ms"),
    "handler": (("acked", "nacked:retrying", "nacked:dead", "rejected"), "handler_ms"),
}


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
    """The code (KIND_CODE) of the event's name, qualified where the counts need it:
    claimed:first / claimed:again, nacked:<next state>, expired:<next state>; null for an event
    the cube does not count."""
    event, code = F.col("event"), KIND_CODE
    kind = F.when(event == "claimed", F.when(F.col("attempt") == 1, code["claimed:first"]).otherwise(code["claimed:again"]))
    for failure in ("nacked", "expired"):
        kind = kind.when(event == failure, F.when(F.col("next") == "dead", code[f"{failure}:dead"])
                         .when(F.col("next") == "retrying", code[f"{failure}:retrying"]))
    for name in CUBE_KINDS:
        if ":" not in name:
            kind = kind.when(event == name, code[name])
    return kind.cast("tinyint")


def kind_in(kinds, column: Column | None = None) -> Column:
    """Whether the cube's kind code (or ``column``) is one of these kind names."""
    return (F.col("kind") if column is None else column).isin(*[KIND_CODE[name] for name in kinds])


def bucket(value: Column) -> Column:
    """Exact under EXACT_BELOW_MS; above, rounded to 3 significant digits."""
    scale = F.pow(F.lit(10.0), F.floor(F.log10(value)) - 2)
    return F.when(value < EXACT_BELOW_MS, value).otherwise((F.round(value / scale) * scale).cast("long"))


def minute_cube(events: DataFrame, may_repeat: Column | bool = True) -> DataFrame:
    """(topic, group, minute, kind, value, attempt) -> n events, copies (n before de-duplication);
    a cell may be split over more than one row, so readers sum ``n`` and ``copies``.

    ``value`` is the event's measure (lateness of first claims, handler time of acks and
    failures, bucketed), ``attempt`` is kept for acks only. ``may_repeat`` says which events
    may be in the archive more than once (True: any; a Column: the events of files whose entry
    ranges overlap, see delayq_analytics.files). Only those are de-duplicated; the others are
    counted in one aggregation that Spark mostly does before its shuffle, without their event ids.

    Duplicates of an event share its ts, hence its minute: after hash-partitioning by minute,
    both the de-duplication and the aggregation run inside each partition, so that exchange
    carries five narrow columns. The cube comes out hash-partitioned by minute either way."""
    coded = events.select("topic", group_of().alias("group"), "event_id", _minute(F.col("ts")).alias("minute"),
                          event_kind().alias("kind"), "event", "attempt", *{column for _, column in MEASURES.values()},
                          F.lit(may_repeat).alias("may_repeat"))
    value = F.lit(None).cast("long")
    for kinds, column in MEASURES.values():
        value = F.when(kind_in(kinds) & F.col(column).isNotNull(), bucket(F.col(column))).otherwise(value)
    cell = ["topic", "group", "minute", "kind", "value", "attempt"]
    narrow = coded.select("topic", "group", "event_id", "minute", "kind", value.alias("value"),
                          F.when(F.col("event") == "acked", F.col("attempt")).alias("attempt"), "may_repeat")
    repeated = (narrow.where("may_repeat").repartition("minute")
                .groupBy("minute", "topic", "group", "event_id", "kind", "value", "attempt")
                .agg(F.count("*").alias("copies"))
                .groupBy(*cell).agg(F.count("*").alias("n"), F.sum("copies").alias("copies")))
    once = narrow.where(~F.col("may_repeat")).groupBy(*cell).agg(F.count("*").alias("n"),
                                                                 F.count("*").alias("copies"))
    if may_repeat is True:
        return repeated
    # Partitioned by minute like the de-duplicated cube: the per-minute counts and histograms
    # then group within each partition, with no shuffle of their own (measured: timings 13 s
    # over a cube partitioned by all its columns, 5 s like this). Not aggregated again: a cell
    # may be in two rows, and every reader of the cube sums.
    return (once if may_repeat is False else once.unionByName(repeated)).repartition("minute")


def counts_of(cube: DataFrame) -> DataFrame:
    """Per topic and group per minute, and per topic over its groups (group ``*``, where
    ``published`` is counted): one column per COUNT_COLUMNS entry."""
    sums = [F.sum(F.when(kind_in(kinds), F.col("n")).otherwise(0)).cast("long").alias(name)
            for name, kinds in KINDS.items()]
    both = rolled_up(cube, [["topic", "group", "minute"], ["topic", "minute"]], sums)
    # The per-group level must not list the topic's own ``published`` rows as a group ``*``.
    both = both.where((F.col("level") == 1) | (F.col("group") != ALL_GROUPS))
    return finish_levels(both).withColumn("date", F.to_date("minute"))


def rolled_up(frame: DataFrame, levels: list[list[str]], aggregates: list[Column]) -> DataFrame:
    """One aggregation for several grouping levels (one pass over ``frame``, not one per level),
    with a ``level`` column: the index of each row's level in ``levels``. A level that leaves out
    topic or group has them null: ``finish_levels`` makes them ``*``."""
    columns = list(dict.fromkeys(c for level in levels for c in level))
    # grouping_id's bits say which columns a row's level left out; map them to the level's index.
    ids = {sum(1 << (len(columns) - 1 - i) for i, c in enumerate(columns) if c not in level): n
           for n, level in enumerate(levels)}
    level = F.lit(None).cast("int")
    for bits, n in ids.items():
        level = F.when(F.col("_gid") == bits, F.lit(n)).otherwise(level)
    return (frame.groupingSets(levels, *columns).agg(*aggregates, F.grouping_id(*columns).alias("_gid"))
            .withColumn("level", level).drop("_gid"))


def finish_levels(frame: DataFrame) -> DataFrame:
    return (frame.withColumn("topic", F.coalesce(F.col("topic"), F.lit(ALL_TOPICS)))
            .withColumn("group", F.coalesce(F.col("group"), F.lit(ALL_GROUPS))).drop("level"))


def timings_of(cube: DataFrame) -> DataFrame:
    """Per topic and group (and ``*`` rollups: a topic's groups, all topics) per minute per
    measure (lateness, handler): count, p50, p95, p99 (nearest rank, see the module docstring)
    and max, in milliseconds."""
    measure = F.lit(None).cast("string")
    for name, (kinds, _column) in MEASURES.items():
        measure = F.when(kind_in(kinds), F.lit(name)).otherwise(measure)
    # Three aggregations, not one over grouping sets: measured here, that took 40 % longer.
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
    acked = cube.where(kind_in(["acked"]))
    return finish_levels(rolled_up(acked, [["topic", "group", "attempt"], ["topic", "attempt"], ["attempt"]],
                                   [F.sum("n").alias("messages")]))


def minute_counts(events: DataFrame) -> DataFrame:
    return counts_of(minute_cube(events))


def timings(events: DataFrame) -> DataFrame:
    return timings_of(minute_cube(events))


def attempts(events: DataFrame) -> DataFrame:
    return attempts_of(minute_cube(events))


def late_causes(events: DataFrame) -> DataFrame:
    """Late deliveries per topic and group per minute by cause (the claim's ``lateness_cause``,
    which the archive keeps in ``extra``; see queue_core/events.py), and per topic over its
    groups (group ``*``): deliveries and the largest lateness (ms). Reads only claimed events
    that carry a cause (late ones: a small share), each once even when archived twice."""
    cause = F.get_json_object(F.col("extra"), "$.lateness_cause")
    late = (events.where((F.col("event") == "claimed") & F.col("extra").isNotNull())
            .withColumn("cause", cause).where(F.col("cause").isNotNull())
            .dropDuplicates(["topic", "event_id"])
            .withColumn("group", group_of()).withColumn("minute", _minute(F.col("ts"))))
    both = rolled_up(late, [["topic", "group", "minute", "cause"], ["topic", "minute", "cause"]],
                     [F.count(F.lit(1)).alias("deliveries"), F.max("lateness_ms").alias("max_ms")])
    return finish_levels(both).withColumn("date", F.to_date("minute"))


def error_groups(events: DataFrame) -> DataFrame:
    """Dead letters by (topic, group, fingerprint), and by (topic, fingerprint) over the groups as
    group ``*``: deaths, first/last seen, sample ids, replays and successful replays (definitions
    in the module docstring).

    Reads only dead and replayed events and the acks of replayed messages (a small share of all
    events): the acks are found by a broadcast semi-join, so no ack is shuffled that cannot matter.
    Each message's events then meet in one array, sorted by time (an event archived twice is one
    array element, dropped by ``array_distinct``), and every death's outcome is read off it: no
    joins between deaths, replays and ends, no window."""
    keys = ["topic", "group", "msg"]
    events = events.withColumn("group", group_of())
    died_or_replayed = events.where(F.col("event").isin("dead", "replayed")).localCheckpoint()
    replayed = F.broadcast(died_or_replayed.where(F.col("event") == "replayed").select(*keys).distinct())
    acks = events.where(F.col("event") == "acked").join(replayed, keys, "left_semi")
    fields = ("ts", "event_id", "event", "fp")   # sorted by ts, then event_id: the order of ties
    timelines = (died_or_replayed.select(*keys, *fields).unionByName(acks.select(*keys, *fields))
                 .groupBy(*keys).agg(F.array_sort(F.array_distinct(F.collect_list(F.struct(*fields)))).alias("ev")))
    ev = F.col("ev")

    def outcome(death):
        replay_ts = F.array_min(F.transform(
            F.filter(ev, lambda e: (e["event"] == "replayed") & (e["ts"] >= death["ts"])), lambda e: e["ts"]))
        end = F.get(F.filter(ev, lambda e: e["event"].isin("acked", "dead") & (e["ts"] > replay_ts)), 0)
        return F.struct(death["ts"].alias("dead_ts"), death["fp"].alias("fp"),
                        replay_ts.isNotNull().alias("was_replayed"),
                        F.coalesce(end["event"] == "acked", F.lit(False)).alias("replay_succeeded"))
    deaths = (timelines.select(*keys, F.explode(F.transform(F.filter(ev, lambda e: e["event"] == "dead"), outcome))
                               .alias("o"))
              .select(*keys, "o.*"))
    samples = F.slice(F.array_sort(F.collect_list(F.struct("dead_ts", "msg"))), 1, SAMPLE_IDS)
    figures = [F.count("*").alias("dead"),
               F.timestamp_millis(F.min("dead_ts")).alias("first_seen"),
               F.timestamp_millis(F.max("dead_ts")).alias("last_seen"),
               F.transform(samples, lambda s: s["msg"]).alias("sample_ids"),
               F.sum(F.col("was_replayed").cast("long")).alias("replayed"),
               F.sum(F.col("replay_succeeded").cast("long")).alias("replay_succeeded")]
    both = finish_levels(rolled_up(deaths, [["topic", "group", "fp"], ["topic", "fp"]], figures))
    return (both.withColumn("replayed_share", F.col("replayed") / F.col("dead"))
            .withColumn("replay_success_share",
                        F.when(F.col("replayed") > 0, F.col("replay_succeeded") / F.col("replayed"))))
