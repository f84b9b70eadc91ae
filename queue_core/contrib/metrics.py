"""A worker's own Prometheus metrics (``delayq worker --metrics-port N``), on prometheus_client.

Lateness (claim - due, by Redis's clock) and handler-time histograms, in-flight messages, lease
extensions and lease losses, messages by outcome, claims a dispatch limit cut short, labelled by
topic and group. prometheus_client
is optional for the engine: ``pip install 'delayq[metrics]'``; without it the worker runs with
the no-op ``NO_METRICS`` (queue_core.worker: what a worker reports is the worker's interface,
these metrics one way to collect it).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidArgument
from ..worker.rules import NO_METRICS, NoMetrics

__all__ = ["HANDLER_BUCKETS", "LATENESS_BUCKETS", "NO_METRICS", "NoMetrics", "WorkerMetrics"]

# Seconds. Lateness sits in milliseconds when workers keep up; handlers range widely.
LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
HANDLER_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics(NoMetrics):
    """The metrics of one worker process, in their own registry (never the global one, so two
    workers in one test process do not collide)."""

    def __init__(self, group: str, worker: str):
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError:
            raise InvalidArgument("worker metrics need prometheus_client: pip install 'delayq[metrics]'") from None
        self.group = group
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["topic", "group"]
        self._lateness = Histogram("delayq_worker_lateness_seconds", "Claim time minus due time, by Redis's clock",
                                   labels, buckets=LATENESS_BUCKETS, registry=self.registry)
        self._handler = Histogram("delayq_worker_handler_seconds", "Time in the handler, per message (a batch "
                                  "handler's time counts once per batch)", labels, buckets=HANDLER_BUCKETS,
                                  registry=self.registry)
        self._outcomes = Counter("delayq_worker_messages", "Messages settled by this worker, by outcome (acked, "
                                 "nacked, rejected)", [*labels, "outcome"], registry=self.registry)
        self._extensions = Counter("delayq_worker_lease_extensions", "Leases extended for long handlers", labels,
                                   registry=self.registry)
        self._losses = Counter("delayq_worker_lease_losses", "Leases found lost (the handler outlived its lease: "
                               "the message was or will be redelivered)", labels, registry=self.registry)
        self._waits = Counter("delayq_worker_throttled_claims", "Claims a dispatch limit cut short (rate or in-flight, "
                              "the group's or a fairness key's): the worker then sleeps until the limit allows "
                              "more", labels, registry=self.registry)
        self._in_flight = Gauge("delayq_worker_in_flight", "Messages claimed and not yet settled",
                                ["group", "worker"], registry=self.registry)
        self._worker = worker

    def claimed(self, topic: str, lateness_s: float) -> None:
        self._lateness.labels(topic, self.group).observe(max(0.0, lateness_s))

    def handled(self, topic: str, seconds: float, n: int = 1) -> None:
        self._handler.labels(topic, self.group).observe(seconds)

    def settled(self, topic: str, outcome: str, n: int = 1) -> None:
        self._outcomes.labels(topic, self.group, outcome).inc(n)

    def extended(self, topic: str, n: int = 1) -> None:
        self._extensions.labels(topic, self.group).inc(n)

    def lease_lost(self, topic: str, n: int = 1) -> None:
        self._losses.labels(topic, self.group).inc(n)

    def waited(self, topic: str) -> None:
        self._waits.labels(topic, self.group).inc()

    def watch_in_flight(self, count: Callable[[], int]) -> None:
        self._in_flight.labels(self.group, self._worker).set_function(count)

    def serve(self, port: int, host: str = "127.0.0.1"):
        """Serve the metrics over HTTP (a daemon thread); returns the server (``.server_port``)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server
