# Deprecated path, kept for one release: the worker metrics are in queue_core.contrib.metrics.
from .contrib.metrics import HANDLER_BUCKETS, LATENESS_BUCKETS, NO_METRICS, NoMetrics, WorkerMetrics  # noqa: F401
