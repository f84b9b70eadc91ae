"""Alerts: thresholds per topic and consumer group, set in the Django admin, evaluated every
minute by a Celery beat task (dashboard.alerts). An alert notifies once when it starts and once
when it ends; each of those is an AlertEvent, delivered (and retried) apart from the evaluation,
so a slow or failing receiver never delays the next evaluation."""

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from .services.contracts import DEFAULT_GROUP

MAX_DELIVERY_ATTEMPTS = 8


class AlertRule(models.Model):
    class Kind(models.TextChoices):
        DEAD_PER_HOUR = "dead_per_hour", "Dead letters in the last hour above"
        OLDEST_READY = "oldest_ready", "Oldest ready message waiting longer than (seconds)"
        NO_WORKERS = "no_workers", "No worker heartbeat for longer than (seconds)"
        LATENESS_P99 = "lateness_p99", "Delivery lateness p99 over the window above (seconds)"

    topic = models.ForeignKey("delayq.Topic", on_delete=models.CASCADE, related_name="alert_rules")
    group = models.CharField(max_length=64, default=DEFAULT_GROUP, help_text="The consumer group watched.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    threshold = models.FloatField(validators=[MinValueValidator(0)],
                                  help_text="The alert starts when the measure goes above this, and ends when it is "
                                            "back at or below it.")
    window_minutes = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1)],
        help_text="Lateness p99 only: the last minutes it is computed over (1 to 60).")
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
        if self.window_minutes > 60:
            raise ValidationError({"window_minutes": "At most 60: the per-minute counters keep an hour."})

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
