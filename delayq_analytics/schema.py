"""The archive's one schema, in pyarrow (written by the archiver) and Spark (read by the job).

A row is one event of one message. The engine batches the events of a script call into one
stream entry per partition (queue_core/events.py); ``event_id`` is "<partition>-<stream entry
id>-<index in the entry>", unique within a topic, so (topic, event_id) identifies an event and
lets the job drop the duplicates that at-least-once archiving can write. ``group`` is the consumer
group (null for ``published``: every group received it); files written before groups existed
read as the default group and partition 0 (null columns). Times are Redis-clock epoch milliseconds. ``date`` (UTC, from
``ts``) and ``topic`` are Hive-style partition directories, not columns inside the files.
"""

import pyarrow as pa

# Stream fields that become their own column; any other field is kept in ``extra`` (JSON).
INT_FIELDS = ("ts", "attempt", "due", "lateness_ms", "handler_ms")
STR_FIELDS = ("event", "msg", "fp", "next", "actor", "from", "reason", "meta", "group")

ARROW_SCHEMA = pa.schema([
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("event", pa.string(), nullable=False),
    pa.field("msg", pa.string()),
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("attempt", pa.int32()),
    pa.field("due", pa.int64()),
    pa.field("lateness_ms", pa.int64()),
    pa.field("handler_ms", pa.int64()),
    pa.field("fp", pa.string()),
    pa.field("next", pa.string()),
    pa.field("actor", pa.string()),
    pa.field("from_state", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("meta", pa.string()),       # evicted only: the message's metadata JSON
    pa.field("payload", pa.binary()),    # evicted only: the message's payload
    pa.field("extra", pa.string()),      # fields this schema does not know yet, as JSON
    pa.field("group", pa.string()),      # the consumer group (null: every group, or written before groups)
    pa.field("partition", pa.int32()),   # the topic's partition (null: written before partitions)
])

COLUMNS = tuple(ARROW_SCHEMA.names)


def spark_schema():
    """The same schema for Spark, plus the two partition columns. Imported lazily: the archiver
    and the dashboard read and write the archive without Spark installed."""
    from pyspark.sql import types as T

    kinds = {pa.string(): T.StringType(), pa.int64(): T.LongType(), pa.int32(): T.IntegerType(),
             pa.binary(): T.BinaryType()}
    fields = [T.StructField(f.name, kinds[f.type], f.nullable) for f in ARROW_SCHEMA]
    return T.StructType(fields + [T.StructField("date", T.DateType()), T.StructField("topic", T.StringType())])
