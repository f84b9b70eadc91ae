"""Export a tab (or its query's matches) as JSON Lines or CSV: a streamed POST, redacted unless a
view_payload holder asks for the full file, audited at its start and its end."""

import csv
import io
import json

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry, RetryPolicy, Topic

pytestmark = pytest.mark.django_db


def body(response) -> str:
    assert response.streaming
    return b"".join(response.streaming_content).decode()


@pytest.fixture
def secret_topic(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="orders", retry_policy=policy, redaction_rules=["password"])
    return site_queue.publish_many("orders", [{"n": i % 3, "password": "hunter2"} for i in range(9)],
                                   headers={"api_token": "tok-123"})


def test_it_streams_the_matches_redacted_and_audits(viewer, secret_topic):
    url = reverse("delayq:export", args=["orders", "default", "ready"])
    response = viewer.post(url, {"format": "jsonl", "q": "payload.n:1"})
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    assert 'filename="orders-default-ready.jsonl"' in response["Content-Disposition"]
    rows = [json.loads(line) for line in body(response).splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(secret_topic[1::3])
    assert all(json.loads(r["payload"])["password"] == "••••••" and r["headers"]["api_token"] == "••••••" for r in rows)
    start, done = AuditEntry.objects.filter(action__startswith="export.").order_by("pk")
    assert (start.action, done.action, done.affected, done.result) == ("export.start", "export.done", 3, "ok")
    assert start.scope["query"] == "payload.n:1" and start.scope["redacted"] is True
    # a redacted field is not searchable in an export either
    assert body(viewer.post(url, {"format": "jsonl", "q": "payload.password:hunter2"})) == ""


def test_a_full_export_needs_view_payload(viewer, admin_user, secret_topic):
    url = reverse("delayq:export", args=["orders", "default", "ready"])
    assert viewer.post(url, {"format": "csv", "reveal": "1"}).status_code == 400
    text = body(admin_user.post(url, {"format": "csv", "reveal": "1"}))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 9 and all("hunter2" in r["payload"] and "tok-123" in r["headers"] for r in rows)
    assert AuditEntry.objects.filter(action="export.start", scope__redacted=False, username="boss").exists()


def test_a_client_that_goes_away_stops_the_export_and_it_says_so(viewer, secret_topic, site_queue, monkeypatch):
    from queue_core import export

    monkeypatch.setattr(export, "PAGE", 2)
    response = viewer.post(reverse("delayq:export", args=["orders", "ready"]), {"format": "jsonl"})
    lines = iter(response.streaming_content)
    next(lines)
    # The client went away: the server closes the stream (here the test client's wrapper of it,
    # which keeps the test's database connection open as it does through a request).
    response._iterator.close()
    done = AuditEntry.objects.get(action="export.done")
    assert done.result == "cancelled" and done.affected < 9


def test_bad_input_is_a_400_and_get_is_refused(viewer, secret_topic):
    url = reverse("delayq:export", args=["orders", "default", "ready"])
    assert viewer.post(url, {"format": "xml"}).status_code == 400
    bad = viewer.post(url, {"format": "jsonl", "q": "paylod.n:1"})
    assert bad.status_code == 400 and "unknown field" in bad.content.decode()
    assert viewer.get(url).status_code == 405
    assert Client(enforce_csrf_checks=True).post(url, {"format": "jsonl"}).status_code in (302, 403)
    assert not AuditEntry.objects.filter(action="export.start").exists()
