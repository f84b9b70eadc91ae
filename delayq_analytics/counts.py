"""The per-minute count columns, by name: shared by the Spark transforms and the dashboard's
tables without importing Spark."""

COUNT_COLUMNS = ("published", "delivered", "redelivered", "acked", "nacked", "rejected", "expired", "retried",
                 "dead_lettered", "replayed", "evicted", "cancelled", "deleted")
