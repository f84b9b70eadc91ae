"""Alerts: thresholds per topic and consumer group, set in the Django admin, evaluated every
minute by a Celery beat task (dashboard.alerts). An alert notifies once when it starts and once
when it ends; each of those is an AlertEvent, delivered (and retried) apart from the evaluation,
so a slow or failing receiver never delays the next evaluation.

A rule is checked on every save, not only in the admin's form: a rule whose group, addresses or
webhook URL cannot work never reaches the database."""

import re

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, validate_email
from django.db import models

from .services.contracts import DEFAULT_GROUP, GROUP_RULE, InvalidArgument, Unavailable, validate_group

MAX_DELIVERY_ATTEMPTS = 8


class AlertRule(models.Model):
    class Kind(models.TextChoices):
        DEAD_PER_HOUR = "dead_per_hour", "Dead letters in the last hour above"
        OLDEST_READY = "oldest_ready", "Oldest ready message waiting longer than (seconds)"
        NO_WORKERS = "no_workers", "No worker heartbeat for longer than (seconds)"
        LATENESS_P99 = "lateness_p99", "Delivery lateness p99 over the window above (seconds)"
        SCHEDULE_MISSED = "schedule_missed", "Schedule ticks missed in the last hour above"
        TIME_TO_FULL = "time_to_full", "Time until Redis or the topic's budget is full under (seconds)"

    topic = models.ForeignKey("delayq.Topic", on_delete=models.CASCADE, related_name="alert_rules")
    group = models.CharField(max_length=64, default=DEFAULT_GROUP, help_text="The consumer group watched.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    threshold = models.FloatField(validators=[MinValueValidator(0)],
                                  help_text="The alert starts when the measure goes above this, and ends when it is "
                                            "back at or below it (time to full: when it falls below it, and ends "
                                            "when it is back at or above it).")
    window_minutes = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1)],
        help_text="Lateness p99 only: the last minutes it is computed over (1 to 60).")
    # Which URLs are called, and how: dashboard.webhooks (checked again in clean()).
    webhook_url = models.URLField(blank=True, help_text="POSTed a JSON body, signed with DELAYQ_ALERT_WEBHOOK_SECRET "
                                                        "(header X-Delayq-Signature).")
    email_to = models.CharField(max_length=500, blank=True, help_text="Comma-separated addresses (Django's mail "
                                                                      "settings send it).")
    enabled = models.BooleanField(default=True)
    firing_since = models.DateTimeField(null=True, blank=True, editable=False)
    last_value = models.FloatField(null=True, blank=True, editable=False)
    last_checked = models.DateTimeField(null=True, blank=True, editable=False)
    last_error = models.TextField(blank=True, editable=False, help_text="Why the last evaluation failed, if it did.")

    class Meta:
        ordering = ["topic__name", "group", "kind"]
        constraints = [models.UniqueConstraint(fields=["topic", "group", "kind"], name="delayq_alert_rule_once")]

    def __str__(self) -> str:
        return f"{self.topic}/{self.group}: {self.get_kind_display()} {self.threshold:g}"

    def clean(self) -> None:
        if not self.webhook_url and not self.email_to.strip():
            raise ValidationError("Give a webhook URL or e-mail addresses: an alert nobody receives is no alert.")
        errors = {}
        if self.window_minutes is not None and self.window_minutes > 60:
            errors["window_minutes"] = "At most 60: the per-minute counters keep an hour."
        for field, check in (("group", self._group_problem), ("email_to", self._email_problem),
                             ("webhook_url", self._webhook_problem)):
            problem = check()
            if problem:
                errors[field] = problem
        if errors:
            raise ValidationError(errors)

    def save(self, *args, **kwargs):
        self.clean()
        super().save(*args, **kwargs)

    def recipients(self) -> list[str]:
        return [a.strip() for a in self.email_to.split(",") if a.strip()]

    def _group_problem(self) -> str | None:
        try:
            validate_group(self.group)
        except InvalidArgument:
            return f"Group names are {GROUP_RULE}."
        if self.group == DEFAULT_GROUP or self.topic_id is None:
            return None
        if self.topic.groups.filter(name=self.group).exists():
            return None
        # Groups added from Python, not in the dashboard, live only in the engine.
        from . import services

        try:
            engine_groups = services.groups(self.topic.name, fresh=True)
        except Unavailable:
            return (f"Topic {self.topic.name} has no consumer group {self.group!r} here, and Redis could not be "
                    "reached to look for one added from Python: add the group under Consumer groups, or try again "
                    "once Redis answers.")
        if self.group in engine_groups:
            return None
        known = sorted({DEFAULT_GROUP, *engine_groups, *self.topic.groups.values_list("name", flat=True)})
        return (f"Topic {self.topic.name} has no consumer group {self.group!r} (it has: {', '.join(known)}): add "
                "the group under Consumer groups first, or pick one of those.")

    def _email_problem(self) -> str | None:
        bad = []
        for address in self.recipients():
            try:
                validate_email(address)
            except ValidationError:
                bad.append(address)
        if bad:
            return (f"Not an e-mail address: {', '.join(repr(a) for a in bad)}. Give addresses like "
                    "ops@example.com, separated by commas.")
        return None

    def _webhook_problem(self) -> str | None:
        if not self.webhook_url:
            return None
        from . import webhooks

        try:
            target = webhooks.parse(self.webhook_url)
            # A name is checked at every call (its DNS answer can change); an address can be now.
            literal = webhooks.literal_address(target.host)
            if literal is not None:
                webhooks.check_address(literal)
        except webhooks.Refused as exc:
            return f"This URL would not be called: {exc}."
        return None

    @property
    def firing(self) -> bool:
        return self.firing_since is not None


class AlertEvent(models.Model):
    """One start or end of an alert, and its delivery."""

    class Change(models.TextChoices):
        FIRING = "firing", "started"
        RESOLVED = "resolved", "ended"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    change = models.CharField(max_length=8, choices=Change.choices)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    value = models.FloatField(null=True)
    summary = models.CharField(max_length=300)
    delivered = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt = models.DateTimeField(null=True, blank=True, db_index=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return self.summary

    @property
    def delivery_state(self) -> str:
        if self.delivered:
            return "delivered"
        return "gave up" if self.attempts >= MAX_DELIVERY_ATTEMPTS else "pending"

    @property
    def receiver_status(self) -> int | None:
        """The HTTP status the webhook answered the last failed attempt with, if it answered."""
        found = re.match(r"HTTP (\d{3})\b", self.last_error)
        return int(found.group(1)) if found else None

    @property
    def shown_outcome(self) -> str:
        """The delivery as every dashboard user may see it: its state and at most the receiver's
        status code (last_error, for the admin's Alert events, names addresses and causes)."""
        if self.delivered or not self.last_error:
            return self.delivery_state
        status = self.receiver_status
        return f"{self.delivery_state}: " + (f"the receiver answered HTTP {status}" if status else
                                             "the last attempt failed (the admin's Alert events say why)")
