"""The Workers page (workers/) and its JSON twin (api/workers/): every live worker with what its
heartbeat reports, and the consumer groups with none, against the session's real Redis."""

import os
import re
import socket
import threading

import pytest
from django.urls import reverse

from queue_core import Worker
from tests.conftest import wait_for

from .test_api_tokens import _api, _token_for
from .test_pages import _round_trips

pytestmark = pytest.mark.django_db

DETAILS = {"host": "box-1", "pid": 4242, "runtime": "asyncio", "concurrency": 50, "in_flight": 7,
           "started_ms": 1_767_225_600_000, "version": "0.1.0"}   # started 2026-01-01 00:00:00 UTC


def _row(html: str, worker_id: str) -> str:
    row = re.search(rf'<tr data-worker="{re.escape(worker_id)}"[^>]*>(.*?)</tr>', html, re.S)
    assert row, f"no row for worker {worker_id}"
    return row.group(1)


def _unattended(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<li data-topic="([^"]+)" data-group="([^"]+)">', html)


def test_finding_no_workers_page_shows_a_running_worker_and_not_once_stopped(viewer, site_queue):
    """The console had only a count of workers: a running Worker is now a row with its host, pid,
    group, topics, concurrency, in flight, start, last heartbeat and version; stopped, it goes."""
    release = threading.Event()
    site_queue.publish("orders", "held")
    worker = Worker(site_queue, {"orders": lambda m: release.wait(10)}, concurrency=3, name="web-1:worker")
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    try:
        def shown_busy():
            page = viewer.get(reverse("delayq:workers")).content.decode()
            return 'data-worker="web-1:worker"' in page and "<td>1</td>" in _row(page, "web-1:worker")
        wait_for(shown_busy, 15, "the worker's row with 1 in flight")
        row = _row(viewer.get(reverse("delayq:workers")).content.decode(), "web-1:worker")
        for shown in (socket.gethostname(), f"<td>{os.getpid()}</td>", ">orders</a>", "<td>threads</td>",
                      "<td>3</td>", "<td>1</td>", "s ago", "UTC"):
            assert shown in row, shown
    finally:
        release.set()
        worker.stop()
        thread.join(15)
    assert not thread.is_alive()
    page = viewer.get(reverse("delayq:workers")).content.decode()
    assert 'data-worker="web-1:worker"' not in page and ("orders", "default") in _unattended(page)


def test_workers_page_names_the_groups_without_a_worker(viewer, site_queue):
    site_queue.configure_topic("orders")
    site_queue.configure_group("orders", "billing")
    site_queue.configure_topic("emails")
    site_queue.heartbeat(["orders"], "w-1", details=DETAILS)
    response = viewer.get(reverse("delayq:workers"))
    html = response.content.decode()
    assert response.status_code == 200 and "delayq/workers.html" in [t.name for t in response.templates]
    row = _row(html, "w-1")
    for shown in ("<td>default</td>", "<td>box-1</td>", "<td>4242</td>", "<td>asyncio</td>", "<td>50</td>",
                  "<td>7</td>", "2026-01-01 00:00:00.000 UTC", "<td>0.1.0</td>"):
        assert shown in row, shown
    assert sorted(_unattended(html)) == [("emails", "default"), ("orders", "billing")]
    assert 'href="/topics/orders/billing/ready/"' in html
    assert "1 live worker" in html and "7 messages in flight" in html


def test_a_worker_without_details_is_listed_with_dashes(viewer, site_queue):
    site_queue.configure_topic("orders")
    site_queue.heartbeat(["orders"], "older-delayq")
    row = _row(viewer.get(reverse("delayq:workers")).content.decode(), "older-delayq")
    assert "<td>—</td>" in row and ">orders</a>" in row


def test_workers_page_sorts_and_refuses_an_unknown_sort(viewer, site_queue):
    site_queue.configure_topic("orders")
    site_queue.heartbeat(["orders"], "idle", details={**DETAILS, "in_flight": 0, "host": "a-host"})
    site_queue.heartbeat(["orders"], "busy", details={**DETAILS, "in_flight": 9, "host": "z-host"})
    by_busy = viewer.get(reverse("delayq:workers"), {"sort": "busy"}).content.decode()
    by_host = viewer.get(reverse("delayq:workers"), {"sort": "host"}).content.decode()
    assert by_busy.index('data-worker="busy"') < by_busy.index('data-worker="idle"')
    assert by_host.index('data-worker="idle"') < by_host.index('data-worker="busy"')
    refused = viewer.get(reverse("delayq:workers"), {"sort": "cpu"})
    assert refused.status_code == 400 and "use one of group, host, busy, since, beat" in refused.content.decode()
    api = viewer.get(reverse("delayq:api_workers"), {"sort": "cpu"})
    assert api.status_code == 400 and "use one of" in api.json()["error"]


def test_workers_page_serves_only_its_region_to_htmx(viewer, site_queue):
    site_queue.configure_topic("orders")
    html = viewer.get(reverse("delayq:workers"), headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="workers"') and "<html" not in html


def test_workers_page_and_api_need_view_queue(client, nobody, viewer, site_queue):
    site_queue.configure_topic("orders")
    login = client.get(reverse("delayq:workers"))
    assert login.status_code == 302 and login["Location"].startswith("/login/?next=")
    assert client.get(reverse("delayq:api_workers")).status_code == 401
    assert nobody.get(reverse("delayq:workers")).status_code == 403
    refused = nobody.get(reverse("delayq:api_workers"))
    assert refused.status_code == 403 and "view_queue" in refused.json()["error"]
    assert viewer.get(reverse("delayq:workers")).status_code == 200
    assert viewer.get(reverse("delayq:api_workers")).status_code == 200


def test_workers_is_in_the_main_navigation(viewer, site_queue):
    html = viewer.get(reverse("delayq:overview")).content.decode()
    assert f'<a href="{reverse("delayq:workers")}">Workers</a>' in html


def test_api_lists_workers_and_groups_without_one(viewer, site_queue):
    site_queue.configure_topic("orders")
    site_queue.configure_group("orders", "billing")
    site_queue.heartbeat(["orders"], "w-1", details=DETAILS)
    body = viewer.get(reverse("delayq:api_workers")).json()
    [worker] = body["workers"]
    assert {k: worker[k] for k in ("id", "group", "topics", "host", "pid", "runtime", "concurrency", "in_flight",
                                   "started", "version")} == {
        "id": "w-1", "group": "default", "topics": ["orders"], "host": "box-1", "pid": 4242, "runtime": "asyncio",
        "concurrency": 50, "in_flight": 7, "started": "2026-01-01T00:00:00+00:00", "version": "0.1.0"}
    assert worker["last_beat"] <= body["now"] and 0 <= worker["last_beat_age_s"] < 30
    assert body["groups_without_workers"] == [{"topic": "orders", "group": "billing"}]
    assert body["live_within_s"] == 30


def test_api_workers_follows_token_scopes(operator, site_queue):
    for topic in ("orders", "billing"):
        site_queue.configure_topic(topic)
    site_queue.heartbeat(["orders", "billing"], "both", details=DETAILS)
    site_queue.heartbeat(["orders"], "orders-only", details=DETAILS)
    url = reverse("delayq:api_workers")
    reader = _api(_token_for(operator, "dashboards", access="read"), "GET", url)
    assert reader.status_code == 200 and [w["id"] for w in reader.json()["workers"]] == ["both", "orders-only"]
    producer = _api(_token_for(operator, "shop", access="publish"), "GET", url)
    assert producer.status_code == 403 and "may only publish" in producer.json()["error"]
    limited = _api(_token_for(operator, "billing tool", topics="billing"), "GET", url).json()
    assert [(w["id"], w["topics"]) for w in limited["workers"]] == [("both", ["billing"])]


def test_workers_page_says_when_redis_is_down(viewer, settings):
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:1/0"
    response = viewer.get(reverse("delayq:workers"))
    assert response.status_code == 200 and "Redis is unreachable" in response.content.decode()
    assert viewer.get(reverse("delayq:api_workers")).status_code == 503


def test_finding_the_unacked_counts_are_one_pipeline_per_poll_and_capped(viewer, site_queue, monkeypatch):
    """Review 38w, 7: lease_counts of every topic x group x partition costs the same round trips
    for 1 group as for 40 (one pipeline and TIME), and a poll counts at most LEASE_SLOTS group
    partitions, saying how many groups it left uncounted."""
    from dashboard import services

    url = reverse("delayq:workers")
    site_queue.publish("t00", "x")
    site_queue.claim("t00", 1)
    viewer.get(url)                                                 # connections made, layouts cached
    one = _round_trips(viewer, url, monkeypatch)
    for i in range(1, 40):
        site_queue.publish(f"t{i:02d}", "x")
    viewer.get(url)
    assert _round_trips(viewer, url, monkeypatch) == one
    html = viewer.get(url).content.decode()
    assert '<tr data-topic="t00" data-group="default"' in html and 'data-testid="leases-uncounted"' not in html
    monkeypatch.setattr(services.workers, "LEASE_SLOTS", 10)
    monkeypatch.setattr(services, "LEASE_SLOTS", 10)
    html = viewer.get(url).content.decode()
    uncounted = re.search(r'data-testid="leases-uncounted">Unacked not counted for (\d+) more groups', html)
    slots = sum(site_queue.layout(f"t{i:02d}").partitions for i in range(40))
    assert uncounted and int(uncounted.group(1)) > 0 and slots > 10
    assert '<tr data-topic="t00" data-group="default"' in html       # the first groups are still counted

