"""Alerts against a real local HTTP receiver: an alert fires once and resolves once, a failing or
hanging webhook is retried later and never holds up the evaluation, e-mail goes through Django's
mail, and the overview shows what is firing."""

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from dashboard import alerts, services
from dashboard.models import AlertEvent, AlertRule, RetryPolicy, Topic
from dashboard.schedule import beat_schedule

from .test_pages import kill

pytestmark = pytest.mark.django_db
SECRET = "alert-secret-for-tests-0123456789"


class Receiver:
    """A webhook receiver on loopback: records each POST; answers with the next queued status
    (200 when none), or holds the request until released when ``hang`` is set."""

    def __init__(self):
        self.calls, self.statuses = [], []
        self.hang = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.calls.append((dict(self.headers), body))
                if receiver.hang.is_set():
                    receiver.release.wait(10)
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.calls]

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def orders(site_queue, settings):
    settings.DELAYQ_ALERT_WEBHOOK_SECRET = SECRET
    # The receivers here are plain HTTP on loopback, which delayq refuses unless told otherwise.
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = ["127.0.0.1/32"]
    site_queue.configure_topic("orders")
    return Topic.objects.create(name="orders", retry_policy=RetryPolicy.objects.create(name="p", jitter=0))


def wait_until(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.02)


def test_an_alert_fires_once_and_resolves_once(orders, site_queue, receiver):
    rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.OLDEST_READY, threshold=0.2,
                                    webhook_url=receiver.url)
    assert alerts.evaluate() == []                     # nothing ready: nothing to measure, no alert
    site_queue.publish("orders", b"waiting")
    wait_until(lambda: (services.health.measure("orders", "default", "oldest_ready") or 0) > 0.2,
               what="the ready message older than the threshold")
    fired = alerts.evaluate()
    assert [e.change for e in fired] == ["firing"] and alerts.evaluate() == []   # no repeat while it holds
    assert alerts.deliver() == (1, 0) and alerts.deliver() == (0, 0)
    headers, body = receiver.calls[0]
    expected = "sha256=" + hmac.new(SECRET.encode(), headers["X-Delayq-Timestamp"].encode() + b"." + body,
                                    hashlib.sha256).hexdigest()
    assert headers["X-Delayq-Signature"] == expected
    first = receiver.bodies()[0]
    assert first["alert"] == "firing" and first["topic"] == "orders" and first["value"] > 0.2
    assert "oldest ready message waiting" in first["summary"]
    site_queue.ack(site_queue.claim("orders")[0])
    assert [e.change for e in alerts.evaluate()] == ["resolved"] and alerts.evaluate() == []
    assert alerts.deliver() == (1, 0)
    assert [b["alert"] for b in receiver.bodies()] == ["firing", "resolved"]
    rule.refresh_from_db()
    assert not rule.firing and rule.last_checked is not None
    assert [e.delivery_state for e in AlertEvent.objects.all()] == ["delivered", "delivered"]


def test_a_failing_webhook_is_retried_later_and_a_hanging_one_costs_only_its_timeout(
        orders, site_queue, receiver, settings):
    AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0, webhook_url=receiver.url)
    kill(site_queue, "orders", ["bad"])
    [event] = alerts.evaluate()
    receiver.statuses.append(500)
    assert alerts.deliver() == (0, 1)
    event.refresh_from_db()
    assert event.attempts == 1 and not event.delivered and "500" in event.last_error
    assert event.next_attempt > timezone.now() + timedelta(seconds=50)      # retried a minute later, not now
    assert alerts.deliver() == (0, 0) and len(receiver.calls) == 1
    # A receiver that hangs: the delivery gives up at its deadline and leaves the event for later.
    settings.DELAYQ_ALERT_WEBHOOK_DEADLINE = 0.5
    receiver.hang.set()
    started = time.monotonic()
    assert alerts.deliver(now=timezone.now() + timedelta(minutes=2)) == (0, 1)
    assert time.monotonic() - started < 3
    # The evaluation never waits on a receiver: it records and moves on while one still hangs.
    site_queue.replay_dead("orders")
    site_queue.redis.delete(site_queue.keys("orders").g.minutes)   # the last hour's dead counters gone
    started = time.monotonic()
    assert [e.change for e in alerts.evaluate()] == ["resolved"]
    assert time.monotonic() - started < 1
    receiver.hang.clear()
    receiver.release.set()
    assert alerts.deliver(now=timezone.now() + timedelta(minutes=10)) == (2, 0)
    assert [b["alert"] for b in receiver.bodies()[-2:]] == ["firing", "resolved"]


def test_email_alerts_and_the_no_worker_rule(orders, site_queue):
    AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.NO_WORKERS, threshold=60,
                             email_to="ops@example.com, oncall@example.com")
    site_queue.heartbeat(["orders"], "worker-1")
    assert alerts.evaluate() == []                          # a worker beat just now
    site_queue.heartbeat(["orders"], "worker-1", remove=True)
    [event] = alerts.evaluate()
    assert "since the last worker heartbeat never" in event.summary
    assert alerts.deliver() == (1, 0)
    assert mail.outbox[0].subject == event.summary and mail.outbox[0].to == ["ops@example.com", "oncall@example.com"]


def test_rules_need_a_receiver_and_the_overview_shows_alerts(orders, site_queue, viewer):
    with pytest.raises(ValidationError, match="nobody receives"):
        AlertRule(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=1).full_clean()
    rule = AlertRule.objects.create(topic=orders, kind=AlertRule.Kind.DEAD_PER_HOUR, threshold=0,
                                    email_to="ops@example.com")
    kill(site_queue, "orders", ["x"])
    alerts.evaluate()
    page = viewer.get(reverse("delayq:overview")).content.decode()
    assert 'data-testid="alerts-firing"' in page and "orders/default" in page
    assert "[ALERT] orders/default: dead letters in the last hour 1 (limit 0)" in page
    rule.delete()
    assert 'data-testid="alerts-firing"' not in viewer.get(reverse("delayq:overview")).content.decode()


def test_the_beat_schedule_evaluates_and_delivers_every_minute():
    schedule = beat_schedule()
    assert schedule["delayq-evaluate-alerts"] == {"task": "delayq.evaluate_alerts", "schedule": 60.0}
    assert schedule["delayq-deliver-alerts"] == {"task": "delayq.deliver_alerts", "schedule": 60.0}


def test_the_admin_role_manages_alert_rules(admin_user, operator):
    assert admin_user.user.has_perm("delayq.add_alertrule") and admin_user.user.has_perm("delayq.view_alertevent")
    assert not operator.user.has_perm("delayq.add_alertrule")
    assert admin_user.get(reverse("admin:delayq_alertrule_add")).status_code == 200
