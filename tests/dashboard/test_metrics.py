"""The Prometheus endpoint: off by default; a bearer token or view_queue; figures from Redis,
parsed back with prometheus_client's own parser."""

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from queue_core import RetryPolicy as EnginePolicy

pytestmark = pytest.mark.django_db
TOKEN = "s3cret-metrics-token-0123456789"


@pytest.fixture
def metrics_on(settings):
    settings.DELAYQ_METRICS = True
    settings.DELAYQ_METRICS_TOKEN = TOKEN
    return reverse("delayq:metrics")


def samples(body: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_are_off_unless_enabled(viewer, settings):
    settings.DELAYQ_METRICS = False
    assert viewer.get(reverse("delayq:metrics")).status_code == 404


def test_a_bearer_token_or_view_queue_may_scrape(metrics_on, viewer, nobody, site_queue):
    site_queue.publish("orders", "x")
    anonymous = Client().get(metrics_on)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert Client().get(metrics_on, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert nobody.get(metrics_on).status_code == 401                      # logged in, no view_queue
    scraped = Client().get(metrics_on, headers={"Authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200 and scraped["Content-Type"].startswith("text/plain; version=0.0.4")
    assert viewer.get(metrics_on).status_code == 200
    assert Client().post(metrics_on, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 405


def test_figures_per_topic_and_group_match_the_engine(metrics_on, viewer, site_queue):
    q = site_queue
    q.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    q.configure_group("orders", "billing", retry=EnginePolicy.fixed(0, max_attempts=1))
    q.publish_many("orders", ["a", "b", "c"])
    q.publish("orders", "later", delay=3600)
    for d in q.claim("orders", 2, group="billing"):
        q.nack(d, "boom")
    q.ack_many(q.claim("orders", 3))
    q.heartbeat(["orders"], "w1", group="billing")
    q.pause("orders", "billing")
    got = samples(viewer.get(metrics_on).content.decode())

    def at(name, group, **labels):
        return got[(name, tuple(sorted({"topic": "orders", "group": group, **labels}.items())))]
    assert at("delayq_messages", "billing", state="dead") == 2
    assert at("delayq_messages", "billing", state="ready") == 1
    assert at("delayq_messages", "billing", state="pending") == 1
    assert at("delayq_messages", "default", state="ready") == 0
    assert at("delayq_events_total", "billing", event="dead") == 2
    assert at("delayq_events_total", "default", event="acked") == 3
    assert at("delayq_events_total", "default", event="published") == 4
    assert at("delayq_workers", "billing") == 1 and at("delayq_workers", "default") == 0
    assert at("delayq_paused", "billing") == 1 and at("delayq_paused", "default") == 0
    assert at("delayq_oldest_ready_age_seconds", "billing") >= 0
    assert at("delayq_oldest_ready_age_seconds", "default") == 0           # nothing ready


def test_redis_down_is_a_plain_503(metrics_on, viewer, settings):
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:1/0"
    response = viewer.get(metrics_on)
    assert response.status_code == 503 and b"Redis is unreachable" in response.content


def test_a_short_token_is_a_settings_error(settings):
    from dashboard import conf

    settings.DELAYQ_METRICS_TOKEN = "short"
    assert ("DELAYQ_METRICS_TOKEN", "must be empty or a secret of at least 16 characters") in conf.problems()


def test_the_example_grafana_dashboard_queries_only_metrics_delayq_serves(metrics_on, viewer, site_queue):
    """docs/grafana-dashboard.json: valid JSON whose every query names a metric that the
    dashboard's /metrics or a worker's --metrics-port actually serves."""
    import json
    import re
    from pathlib import Path

    from prometheus_client import generate_latest

    from queue_core.metrics import WorkerMetrics

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    wanted = {name for p in dashboard["panels"] for t in p["targets"] for name in re.findall(r"delayq_\w+", t["expr"])}
    wanted |= {name for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)
               for name in re.findall(r"delayq_\w+", v["query"]["query"])}
    site_queue.publish("orders", "x")
    served = set(samples(viewer.get(metrics_on).content.decode()))
    worker = WorkerMetrics("default", "w1")
    worker.claimed("orders", 0.01)
    worker.handled("orders", 0.02)
    worker.extended("orders")
    worker.lease_lost("orders")
    worker.watch_in_flight(lambda: 0)
    served |= set(samples(generate_latest(worker.registry).decode()))
    names = {name for name, _labels in served}
    assert wanted and wanted <= names, wanted - names


def ready(got, topic="orders", group="default"):
    return got[("delayq_messages", (("group", group), ("state", "ready"), ("topic", topic)))]


def test_with_a_refresh_interval_scrapes_serve_the_background_copy_while_fresh(metrics_on, viewer, site_queue,
                                                                               settings):
    from dashboard.services.engine import get_queue
    from dashboard.tasks import refresh_metrics
    from queue_core.keys import metrics_snapshot_key

    settings.DELAYQ_METRICS_REFRESH = 10
    site_queue.publish_many("orders", ["a", "b"])
    # No copy yet (no beat has run): the scrape reads Redis itself.
    first = samples(viewer.get(metrics_on).content.decode())
    assert ready(first) == 2 and not any(name == "delayq_metrics_age_seconds" for name, _ in first)
    assert refresh_metrics() > 0
    site_queue.publish("orders", "c")
    served = samples(viewer.get(metrics_on).content.decode())
    assert ready(served) == 2                                   # the copy rendered before "c"
    assert 0 <= served[("delayq_metrics_age_seconds", ())] < 20
    # A copy older than twice the interval (beat stopped) is not served: the scrape renders.
    key = metrics_snapshot_key(get_queue().prefix)
    get_queue().redis.hset(key, "at", get_queue().server_ms() - 21_000)
    assert ready(samples(viewer.get(metrics_on).content.decode())) == 3
    assert get_queue().redis.pttl(key) <= 30_000                 # kept three intervals at most
    assert key not in get_queue().undocumented_keys()


def test_the_refresh_task_and_its_beat_entry_only_when_asked(settings):
    from dashboard.conf import problems
    from dashboard.schedule import beat_schedule
    from dashboard.tasks import refresh_metrics

    settings.DELAYQ_METRICS, settings.DELAYQ_METRICS_REFRESH = True, 0
    assert refresh_metrics() == 0
    settings.DELAYQ_METRICS, settings.DELAYQ_METRICS_REFRESH = False, 15
    assert refresh_metrics() == 0
    assert "delayq-refresh-metrics" not in beat_schedule()
    assert beat_schedule(metrics_refresh=15)["delayq-refresh-metrics"] == {"task": "delayq.refresh_metrics",
                                                                          "schedule": 15.0}
    settings.DELAYQ_METRICS_REFRESH = -1
    assert any(name == "DELAYQ_METRICS_REFRESH" for name, _ in problems())


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer", "bEaReR"])
def test_finding_metrics_bearer_scheme_is_case_insensitive(metrics_on, site_queue, scheme):
    scraped = Client().get(metrics_on, headers={"Authorization": f"{scheme} {TOKEN}"})
    assert scraped.status_code == 200
    assert Client().get(metrics_on, headers={"Authorization": f"{scheme} wrong"}).status_code == 401


def test_throttled_claims_per_limit_are_a_metric_of_their_own(metrics_on, viewer, site_queue):
    """delayq_throttled_total{topic,group,reason}: the claims a dispatch limit cut short (issue 33),
    beside the events, on a group whose stats hash also holds a rate bucket."""
    q = site_queue
    q.configure_topic("emails")
    q.configure_group("emails", "default", rate=(2, 60.0))
    q.configure_group("emails", "bulk", max_in_flight_per_key=1)
    q.publish_many("emails", ["x"] * 4, fairness_key="acme")
    assert len(q.claim("emails", 4)) == 1                      # the rate's burst of one
    assert len(q.claim("emails", 4, group="bulk")) == 1        # one in flight per key
    assert len(q.claim("emails", 4)) == 0                      # the bucket is empty: cut short again
    got = samples(viewer.get(metrics_on).content.decode())
    throttled = {labels: v for (name, labels), v in got.items() if name == "delayq_throttled_total"}
    expected = {tuple(sorted({"topic": "emails", "group": g, "reason": r}.items())): n
                for g, r, n in [("default", "rate", 2.0), ("bulk", "key_in_flight", 1.0)]}
    assert throttled == expected
    assert not any("throttled" in dict(labels).get("event", "") for (name, labels) in got)
    assert got[("delayq_events_total", (("event", "claimed"), ("group", "default"), ("topic", "emails")))] == 1
