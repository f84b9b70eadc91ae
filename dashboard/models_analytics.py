"""Tables the analytics job's outputs are loaded into (delayq_analytics.run -> dashboard.analytics).

Every row is per topic and consumer group; group ``*`` is the topic over its groups (where
``published`` is counted), topic ``*`` all topics.

Per-minute rows are replaced a day at a time (the job's window is whole UTC days); the
window-wide rows (attempts, error groups) are replaced whole by each run.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q


class AnalyticsRun(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # True while pending or running; unique when True, so two runs can never overlap.
    active = models.BooleanField(default=True)
    trigger = models.CharField(max_length=16, default="manual", help_text="manual, schedule or command.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    since = models.DateTimeField(null=True, blank=True, help_text="Start of the window (whole UTC days).")
    until = models.DateTimeField(null=True, blank=True, help_text="End of the window, exclusive.")
    stage = models.CharField(max_length=32, blank=True)
    step = models.PositiveSmallIntegerField(default=0)
    steps = models.PositiveSmallIntegerField(default=7)
    events = models.PositiveBigIntegerField(null=True, blank=True, help_text="Events analysed (duplicates dropped).")
    duplicates = models.PositiveBigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Whether the loaded outputs had late_causes: a job from before lateness causes writes none, and
    # the page then says so rather than "no late deliveries".
    late_causes = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["active"], condition=Q(active=True),
                                               name="one_active_analytics_run")]

    def __str__(self) -> str:
        return f"analytics run #{self.pk} ({self.status})"

    @property
    def progress(self) -> int:
        return 100 if self.status == self.Status.DONE else min(99, round(100 * self.step / max(self.steps, 1)))

    @property
    def duration(self):
        return self.finished - self.started if self.started and self.finished else None


class MinuteStat(models.Model):
    """Events of one topic and group in one minute (UTC). Column meanings: delayq_analytics.transforms;
    the names are delayq_analytics.counts.COUNT_COLUMNS (a test keeps them equal)."""

    topic = models.CharField(max_length=128)
    group = models.CharField(max_length=64, default="*")
    minute = models.DateTimeField()
    published = models.PositiveBigIntegerField(default=0)
    delivered = models.PositiveBigIntegerField(default=0)
    redelivered = models.PositiveBigIntegerField(default=0)
    acked = models.PositiveBigIntegerField(default=0)
    nacked = models.PositiveBigIntegerField(default=0)
    rejected = models.PositiveBigIntegerField(default=0)
    expired = models.PositiveBigIntegerField(default=0)
    retried = models.PositiveBigIntegerField(default=0)
    dead_lettered = models.PositiveBigIntegerField(default=0)
    replayed = models.PositiveBigIntegerField(default=0)
    evicted = models.PositiveBigIntegerField(default=0)
    cancelled = models.PositiveBigIntegerField(default=0)
    deleted = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["topic", "group", "minute"], name="one_minute_stat_per_group")]
        indexes = [models.Index(fields=["minute"])]


class TimingStat(models.Model):
    """Lateness or handler time percentiles of one topic and group (``*``: all) in one minute, ms."""

    class Measure(models.TextChoices):
        LATENESS = "lateness", "delivery lateness"
        HANDLER = "handler", "handler time"

    topic = models.CharField(max_length=128)
    group = models.CharField(max_length=64, default="*")
    minute = models.DateTimeField()
    measure = models.CharField(max_length=16, choices=Measure.choices)
    count = models.PositiveBigIntegerField()
    p50 = models.BigIntegerField()
    p95 = models.BigIntegerField()
    p99 = models.BigIntegerField()
    max = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["topic", "group", "minute", "measure"],
                                               name="one_timing_stat_per_group")]
        indexes = [models.Index(fields=["measure", "topic", "group", "minute"])]


class LateCauseStat(models.Model):
    """Late deliveries (claims the engine gave a lateness cause, queue_core.keys.LATENESS_CAUSES) of
    one topic and group (``*``: its groups) in one minute by cause, and the largest lateness, ms.
    Column names are the job's (delayq_analytics.transforms.late_causes)."""

    topic = models.CharField(max_length=128)
    group = models.CharField(max_length=64, default="*")
    minute = models.DateTimeField()
    cause = models.CharField(max_length=32)
    deliveries = models.PositiveBigIntegerField()
    max_ms = models.BigIntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["topic", "group", "minute", "cause"],
                                               name="one_late_cause_stat_per_group")]
        indexes = [models.Index(fields=["topic", "group", "minute"])]


class AttemptStat(models.Model):
    """Acked messages of a topic and group (or ``*``) that needed ``attempts`` attempts, over the last
    run's window."""

    topic = models.CharField(max_length=128)
    group = models.CharField(max_length=64, default="*")
    attempts = models.PositiveIntegerField()
    messages = models.PositiveBigIntegerField()


class ErrorGroupStat(models.Model):
    """Dead letters of a topic and group (``*``: its groups) by fingerprint over the last run's
    window, with what replays achieved."""

    topic = models.CharField(max_length=128)
    group = models.CharField(max_length=64, default="*")
    fingerprint = models.CharField(max_length=64)
    dead = models.PositiveBigIntegerField()
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    sample_ids = models.JSONField(default=list)
    replayed = models.PositiveBigIntegerField()
    replay_succeeded = models.PositiveBigIntegerField()

    class Meta:
        ordering = ["-dead"]

    @property
    def replayed_share(self) -> float:
        return self.replayed / self.dead if self.dead else 0.0

    @property
    def replay_success_share(self) -> float | None:
        return self.replay_succeeded / self.replayed if self.replayed else None
