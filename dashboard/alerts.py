"""Alert evaluation and delivery (rules: dashboard.models_alerts).

``evaluate()`` (Celery beat, every minute) reads each enabled rule's measure and records an
AlertEvent when the rule starts firing or stops: once per start and once per end, never a repeat
while the state holds. ``deliver()`` sends the undelivered events, each with a short timeout,
retrying a failed one with a growing delay (1, 2, 4 ... minutes, MAX_DELIVERY_ATTEMPTS tries); it
runs as its own task, so a slow or failing receiver never holds up an evaluation.

Webhooks get ``POST`` JSON and the headers ``X-Delayq-Timestamp`` and ``X-Delayq-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``<timestamp>.<body>`` with DELAYQ_ALERT_WEBHOOK_SECRET (check
it, and reject old timestamps, to know the call came from delayq).
"""

import hashlib
import hmac
import json
import logging
import math
import time
import urllib.error
import urllib.request
from datetime import timedelta

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from . import conf, services
from .models_alerts import MAX_DELIVERY_ATTEMPTS, AlertEvent, AlertRule
from .services.contracts import QueueError, Unavailable

log = logging.getLogger("delayq.alerts")
DELIVERY_TIMEOUT = 5.0


def _shown(value: float | None, kind: str) -> str:
    if value is None:
        return "nothing to measure"
    if math.isinf(value):
        return "never" if kind == AlertRule.Kind.NO_WORKERS else "above every bucket"
    return f"{value:,.0f}" if kind == AlertRule.Kind.DEAD_PER_HOUR else f"{value:,.1f} s"


def summary(rule: AlertRule, change: str, value: float | None) -> str:
    words = {AlertRule.Kind.DEAD_PER_HOUR: "dead letters in the last hour",
             AlertRule.Kind.OLDEST_READY: "oldest ready message waiting",
             AlertRule.Kind.NO_WORKERS: "since the last worker heartbeat",
             AlertRule.Kind.LATENESS_P99: f"delivery lateness p99 over {rule.window_minutes} min"}[rule.kind]
    state = "ALERT" if change == AlertEvent.Change.FIRING else "resolved"
    limit = f"{rule.threshold:,.0f}" if rule.kind == AlertRule.Kind.DEAD_PER_HOUR else f"{rule.threshold:g} s"
    return f"[{state}] {rule.topic.name}/{rule.group}: {words} {_shown(value, rule.kind)} (limit {limit})"


def evaluate() -> list[AlertEvent]:
    """One evaluation of every enabled rule; returns the events it recorded."""
    recorded = []
    for rule in AlertRule.objects.filter(enabled=True).select_related("topic"):
        try:
            value = services.health.measure(rule.topic.name, rule.group, rule.kind, rule.window_minutes)
        except (Unavailable, QueueError) as exc:
            # Redis down says nothing about the rule: keep its state, say why it was not checked.
            AlertRule.objects.filter(pk=rule.pk).update(last_error=str(exc)[:1000], last_checked=timezone.now())
            log.warning("alert %s not evaluated: %s", rule, exc)
            continue
        above = value is not None and value > rule.threshold
        change = None
        with transaction.atomic():
            # Compare-and-set on the firing state: two beat runs at once record one start, one end.
            if above and not rule.firing:
                if AlertRule.objects.filter(pk=rule.pk, firing_since__isnull=True).update(firing_since=timezone.now()):
                    change = AlertEvent.Change.FIRING
            elif not above and rule.firing and AlertRule.objects.filter(
                    pk=rule.pk, firing_since__isnull=False).update(firing_since=None):
                change = AlertEvent.Change.RESOLVED
            AlertRule.objects.filter(pk=rule.pk).update(
                last_value=None if value is None or math.isinf(value) else value, last_checked=timezone.now(),
                last_error="")
            if change:
                recorded.append(AlertEvent.objects.create(rule=rule, change=change, value=value if value is not None
                                                          and not math.isinf(value) else None,
                                                          summary=summary(rule, change, value)[:300],
                                                          next_attempt=timezone.now()))
    return recorded


def payload(event: AlertEvent) -> dict:
    rule = event.rule
    return {"alert": event.change, "summary": event.summary, "topic": rule.topic.name, "group": rule.group,
            "kind": rule.kind, "threshold": rule.threshold, "value": event.value, "at": event.at.isoformat(),
            "rule_id": rule.pk, "event_id": event.pk}


def signature(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def _post(url: str, body: bytes) -> None:
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "delayq-alerts", "X-Delayq-Timestamp": timestamp}
    secret = conf.alert_webhook_secret()
    if secret:
        headers["X-Delayq-Signature"] = signature(secret, timestamp, body)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT) as response:   # noqa: S310 - admin-set URL
        if not 200 <= response.status < 300:
            raise urllib.error.HTTPError(url, response.status, "not 2xx", response.headers, None)


def _send(event: AlertEvent) -> None:
    rule = event.rule
    if rule.webhook_url:
        _post(rule.webhook_url, json.dumps(payload(event)).encode())
    recipients = [a.strip() for a in rule.email_to.split(",") if a.strip()]
    if recipients:
        send_mail(event.summary, json.dumps(payload(event), indent=2), None, recipients, fail_silently=False)


def deliver(now=None) -> tuple[int, int]:
    """Send every event that is due for a (re)try; (delivered, failed) counts."""
    now = now or timezone.now()
    due = AlertEvent.objects.filter(delivered__isnull=True, attempts__lt=MAX_DELIVERY_ATTEMPTS,
                                    next_attempt__lte=now).select_related("rule__topic").order_by("at", "pk")
    sent = failed = 0
    for event in due[:200]:
        # Claim the attempt first (compare-and-set on attempts): two deliverers never send one twice.
        if not AlertEvent.objects.filter(pk=event.pk, attempts=event.attempts, delivered__isnull=True).update(
                attempts=event.attempts + 1, next_attempt=now + timedelta(minutes=2 ** event.attempts)):
            continue
        try:
            _send(event)
        except Exception as exc:  # noqa: BLE001 - any failure of the receiver is a failed attempt
            failed += 1
            AlertEvent.objects.filter(pk=event.pk).update(last_error=f"{type(exc).__name__}: {exc}"[:1000])
            log.warning("alert %s not delivered (attempt %d): %s", event.pk, event.attempts + 1, exc)
            continue
        sent += 1
        AlertEvent.objects.filter(pk=event.pk).update(delivered=timezone.now(), last_error="", next_attempt=None)
    return sent, failed
