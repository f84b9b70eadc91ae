"""Alert evaluation and delivery (rules: dashboard.models_alerts).

``evaluate()`` (Celery beat, every minute) reads each enabled rule's measure and records an
AlertEvent when the rule starts firing or stops: once per start and once per end, never a repeat
while the state holds. ``deliver()`` sends the undelivered events, retrying a failed one with a
growing delay (1, 2, 4 ... minutes, MAX_DELIVERY_ATTEMPTS tries); it runs as its own task, so a
slow or failing receiver never holds up an evaluation. Each rule's events go out in their own
thread, in order, so one slow receiver (each call ends at DELAYQ_ALERT_WEBHOOK_DEADLINE) delays only
its own rule's; once one of a rule's events fails, its later ones in the same run wait for that
one's retry instead of costing another deadline each.

Webhooks get ``POST`` JSON and the headers ``X-Delayq-Timestamp`` and ``X-Delayq-Signature:
sha256=<hex>``, the HMAC-SHA256 of ``<timestamp>.<body>`` with DELAYQ_ALERT_WEBHOOK_SECRET (check
it, and reject old timestamps, to know the call came from delayq). Which addresses a webhook may
reach, and how a call is bounded: dashboard.webhooks.
"""

import hashlib
import hmac
import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from . import conf, services, webhooks
from .models_alerts import MAX_DELIVERY_ATTEMPTS, AlertEvent, AlertRule
from .services.contracts import QueueError, Unavailable

log = logging.getLogger("delayq.alerts")
# Rules delivered at once; more wait for a free thread (each call ends at its deadline).
PARALLEL_RULES = 8
# Events of one rule per run: a long backlog drains over a few runs instead of holding one.
EVENTS_PER_RULE = 20


COUNTS = (AlertRule.Kind.DEAD_PER_HOUR, AlertRule.Kind.SCHEDULE_MISSED)   # measures that are counts, not seconds
BELOW = (AlertRule.Kind.TIME_TO_FULL,)   # measures that alert when they fall under the threshold


def breached(rule: AlertRule, value: float | None) -> bool:
    """Whether ``value`` is on the alerting side of the rule's threshold (None: nothing to measure,
    e.g. a topic that is not growing has no time to full)."""
    if value is None:
        return False
    return value < rule.threshold if rule.kind in BELOW else value > rule.threshold


def _shown(value: float | None, kind: str) -> str:
    if value is None:
        return "nothing to measure"
    if math.isinf(value):
        return "never" if kind == AlertRule.Kind.NO_WORKERS else "above every bucket"
    return f"{value:,.0f}" if kind in COUNTS else f"{value:,.1f} s"


def summary(rule: AlertRule, change: str, value: float | None) -> str:
    words = {AlertRule.Kind.DEAD_PER_HOUR: "dead letters in the last hour",
             AlertRule.Kind.OLDEST_READY: "oldest ready message waiting",
             AlertRule.Kind.NO_WORKERS: "since the last worker heartbeat",
             AlertRule.Kind.LATENESS_P99: f"delivery lateness p99 over {rule.window_minutes} min",
             AlertRule.Kind.SCHEDULE_MISSED: "schedule ticks missed in the last hour",
             AlertRule.Kind.TIME_TO_FULL: "time until Redis or the topic's budget is full"}[rule.kind]
    state = "ALERT" if change == AlertEvent.Change.FIRING else "resolved"
    limit = f"{rule.threshold:,.0f}" if rule.kind in COUNTS else f"{rule.threshold:g} s"
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
        above = breached(rule, value)
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


class DeliveryFailed(Exception):
    """An e-mail that did not go out, in delayq's words."""


def _post(url: str, body: bytes) -> int:
    timestamp = str(int(time.time()))
    headers = {"Content-Type": "application/json", "User-Agent": "delayq-alerts", "X-Delayq-Timestamp": timestamp}
    secret = conf.alert_webhook_secret()
    if secret:
        headers["X-Delayq-Signature"] = signature(secret, timestamp, body)
    return webhooks.post(url, body, headers)


def _send(event: AlertEvent) -> None:
    """Network only, no database: it runs in a delivery thread (the rule and topic are loaded)."""
    rule = event.rule
    if rule.webhook_url:
        _post(rule.webhook_url, json.dumps(payload(event)).encode())
    recipients = rule.recipients()
    if recipients:
        try:
            send_mail(event.summary, json.dumps(payload(event), indent=2), None, recipients, fail_silently=False)
        except Exception as exc:  # noqa: BLE001 - any mail failure is a failed attempt
            # An SMTP error's text is the mail server's answer: kept to the log.
            raise DeliveryFailed(f"e-mail not sent ({type(exc).__name__})") from exc


_SKIPPED = object()   # not tried this run: an earlier event of the same rule failed


def _send_in_order(events: list[AlertEvent]) -> list[tuple[AlertEvent, object]]:
    """(event, None when delivered | the exception | _SKIPPED) for each of one rule's events."""
    outcomes: list[tuple[AlertEvent, object]] = []
    for i, event in enumerate(events):
        try:
            _send(event)
        except Exception as exc:  # noqa: BLE001 - any failure of the receiver is a failed attempt
            outcomes.append((event, exc))
            outcomes += [(later, _SKIPPED) for later in events[i + 1:]]
            break
        outcomes.append((event, None))
    return outcomes


def _error_words(exc: BaseException) -> str:
    """What the event records: delayq's words only, never the receiver's (the log has the rest)."""
    if isinstance(exc, webhooks.Refused):
        return f"refused: {exc}"
    if isinstance(exc, webhooks.Failed | DeliveryFailed):
        return str(exc)
    return f"not delivered ({type(exc).__name__})"


def _claim_due(now) -> dict[int, list[AlertEvent]]:
    """The due events, oldest first per rule, each claimed (compare-and-set on attempts) so two
    deliverers never send one twice; the event objects keep their attempts from before the claim."""
    due = AlertEvent.objects.filter(delivered__isnull=True, attempts__lt=MAX_DELIVERY_ATTEMPTS,
                                    next_attempt__lte=now)
    claimed: dict[int, list[AlertEvent]] = {}
    for rule_id in sorted(set(due.values_list("rule_id", flat=True))):
        for event in due.filter(rule_id=rule_id).select_related("rule__topic").order_by("at", "pk")[:EVENTS_PER_RULE]:
            if AlertEvent.objects.filter(pk=event.pk, attempts=event.attempts, delivered__isnull=True).update(
                    attempts=event.attempts + 1, next_attempt=now + timedelta(minutes=2 ** event.attempts)):
                claimed.setdefault(rule_id, []).append(event)
    return claimed


def deliver(now=None) -> tuple[int, int]:
    """Send every event that is due for a (re)try; (delivered, failed) counts."""
    now = now or timezone.now()
    claimed = _claim_due(now)
    if not claimed:
        return 0, 0
    # Threads do the network calls only; every database write stays in this thread.
    with ThreadPoolExecutor(max_workers=min(PARALLEL_RULES, len(claimed)),
                            thread_name_prefix="delayq-alert-delivery") as pool:
        outcomes = [outcome for batch in pool.map(_send_in_order, claimed.values()) for outcome in batch]
    sent = failed = 0
    retry_at = {}
    for event, outcome in outcomes:
        if outcome is None:
            sent += 1
            AlertEvent.objects.filter(pk=event.pk).update(delivered=timezone.now(), last_error="", next_attempt=None)
        elif outcome is _SKIPPED:
            # Give the attempt back: it was claimed but not made; it goes out after the failed one.
            AlertEvent.objects.filter(pk=event.pk, attempts=event.attempts + 1, delivered__isnull=True).update(
                attempts=event.attempts, next_attempt=retry_at[event.rule_id])
        else:
            failed += 1
            retry_at[event.rule_id] = now + timedelta(minutes=2 ** event.attempts)
            AlertEvent.objects.filter(pk=event.pk).update(last_error=_error_words(outcome)[:1000])
            # The log, unlike any page, keeps the underlying error (an SMTP server's answer, say).
            log.warning("alert %s not delivered (attempt %d): %r (cause: %r)", event.pk, event.attempts + 1, outcome,
                        outcome.__cause__ or outcome.__context__)
    return sent, failed
