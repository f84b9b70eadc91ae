"""Topics and retry policies as operators define them, plus the audit trail.

The engine reads its configuration from Redis; saving a Topic or RetryPolicy writes it there after
the transaction commits (services/sync.py). Retry schedules are computed by queue_core.RetryPolicy, the
same code the engine mirrors in Lua, never by a second copy here.
"""

import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from . import operation_kinds
from .models_limits import DispatchLimits, MemoryBudget
from .redaction import validate_rules
from .services import config_map
from .services.contracts import (
    DEFAULT_GROUP,
    GROUP_RULE,
    MAX_PARTITIONS,
    TOPIC_RULE,
    EngineRetryPolicy,
    GroupConfig,
    InvalidArgument,
    InvalidTopic,
    TopicConfig,
    check_index_fields,
    is_bridge_topic,
    policy_problems,
    validate_group,
    validate_topic,
)


def validate_topic_name(value: str) -> None:
    try:
        validate_topic(value)
    except InvalidTopic:
        raise ValidationError(f"Topic names are {TOPIC_RULE}.", code="invalid_topic") from None


def validate_index_fields(value: str) -> None:
    try:
        check_index_fields([line.strip() for line in value.splitlines() if line.strip()])
    except InvalidArgument as exc:
        raise ValidationError(str(exc), code="invalid_index") from None


def validate_group_name(value: str) -> None:
    try:
        validate_group(value)
    except InvalidArgument:
        raise ValidationError(f"Group names are {GROUP_RULE}.", code="invalid_group") from None
    if value == DEFAULT_GROUP:
        raise ValidationError("The default group's settings are the topic's own (retry policy, visibility "
                              "timeout, retention, paused): edit them on the topic.", code="default_group")


class RetryPolicy(models.Model):
    class Kind(models.TextChoices):
        FIXED = "fixed", "Fixed delay"
        LINEAR = "linear", "Linear (base × attempt)"
        EXPONENTIAL = "exponential", "Exponential (base × factorⁿ)"
        CUSTOM = "custom", "Custom schedule"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.EXPONENTIAL)
    base_delay = models.FloatField(default=1.0, help_text="Seconds (fixed, linear, exponential).")
    factor = models.FloatField(default=2.0, help_text="Exponential only: each delay is this many times the last.")
    max_delay = models.FloatField(default=300.0, help_text="Seconds; caps every delay. 0 = no cap.")
    schedule = models.JSONField(default=list, blank=True,
                                help_text="Custom only: delays in seconds, e.g. [1, 10, 60]; the last repeats.")
    jitter = models.FloatField(default=0.1, help_text="Fraction 0–1: each delay varies by ± this share.")
    max_attempts = models.PositiveIntegerField(default=5, help_text="Deliveries in all, the first included.")
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "retry policies"

    def __str__(self) -> str:
        return self.name

    def to_engine(self) -> EngineRetryPolicy:
        """The engine's policy; raises InvalidArgument for nonsense (clean() reports it per field)."""
        return config_map.policy_to_engine(self)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if not isinstance(self.schedule, list) or not all(
                isinstance(s, int | float) and not isinstance(s, bool) for s in self.schedule):
            errors["schedule"] = ["Give the schedule as a list of seconds, e.g. [1, 10, 60]."]
        if self.kind != self.Kind.CUSTOM and self.schedule:
            errors["schedule"] = ["A schedule is used only by the custom kind; clear it or choose custom."]
        if errors:
            raise ValidationError(errors)
        field_names = {"base": "base_delay"}  # engine name -> model field
        for field, problem in policy_problems(
                self.kind, self.base_delay, self.factor, self.max_delay,
                self.schedule if self.kind == self.Kind.CUSTOM else [], self.jitter, self.max_attempts or 0):
            errors.setdefault(field_names.get(field, field), []).append(problem[0].upper() + problem[1:] + ".")
        if errors:
            raise ValidationError(errors)
        self._refuse_bridge_change()

    def _refuse_bridge_change(self) -> None:
        """A policy a Celery bridge topic (or group) uses is the bridge's: changing it would change
        what the dashboard says the bridge retries with."""
        if self.pk is None:
            return
        stored = RetryPolicy.objects.filter(pk=self.pk).first()
        if stored is None or stored.to_engine() == self.to_engine():
            return
        used_by = sorted({*self.topics.values_list("name", flat=True),
                          *self.groups.values_list("topic__name", flat=True)})
        bridge = [name for name in used_by if is_bridge_topic(name)]
        if bridge:
            raise ValidationError(config_map.BRIDGE_REFUSAL.format(name=", ".join(bridge)) +
                                  " This policy is that topic's; give other topics a policy of their own.")

    @property
    def preview(self) -> str:
        """'1 s, 2 s, 4 s, 8 s, then dead after 5 attempts; about 15 s in total' — from the engine's code."""
        try:
            return self.to_engine().describe()
        except InvalidArgument as exc:
            return f"invalid policy: {exc}"


class Topic(DispatchLimits, MemoryBudget):
    name = models.CharField(max_length=128, unique=True, validators=[validate_topic_name])
    description = models.TextField(blank=True)
    indexed_fields = models.TextField(
        blank=True, validators=[validate_index_fields],
        help_text="Up to 4 fields, one per line, written as in a query: payload.customer.id or header.tenant. "
                  "An equality query on one (payload.customer.id:42) reads an index instead of scanning; "
                  "declared on a topic that holds messages, the index is built in the background first.")
    owner = models.CharField(max_length=100, blank=True, help_text="Team or person to call about this topic.")
    retry_policy = models.ForeignKey(RetryPolicy, on_delete=models.PROTECT, related_name="topics")
    visibility_timeout = models.FloatField(default=30.0, validators=[MinValueValidator(0.01)],
                                           help_text="Seconds a claimed message stays leased without ack.")
    max_payload_bytes = models.PositiveIntegerField(default=1_048_576, validators=[MinValueValidator(1)])
    partitions = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_PARTITIONS)],
        help_text="Partitions spread a topic over a Redis Cluster's shards. Only an empty topic may change it.")
    dead_max_count = models.PositiveIntegerField(default=100_000,
                                                 help_text="Dead letters kept; older ones are evicted (archived).")
    dead_max_age = models.FloatField(default=14 * 86400, validators=[MinValueValidator(0)],
                                     help_text="Seconds a dead letter is kept; 0 = forever.")
    events = models.BooleanField(default=True, help_text="Record every transition for analytics.")
    paused = models.BooleanField(default=False, help_text="Workers stop claiming; publishing goes on.")
    redaction_rules = models.JSONField(
        default=list, blank=True,
        help_text='Keys or dotted paths masked when payloads are shown, e.g. ["password", "card.number"].')
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_error = models.TextField(blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        problems = validate_rules(self.redaction_rules)
        if problems:
            raise ValidationError({"redaction_rules": problems})
        limit_problems = self.limit_problems(self.partitions or 1)
        if limit_problems:
            raise ValidationError(limit_problems)
        if self.retry_policy_id is None:
            # The form reports the missing field itself; engine_config() would raise
            # RelatedObjectDoesNotExist (an HTTP 500) before it could.
            return
        if is_bridge_topic(self.name or ""):
            stored = Topic.objects.filter(pk=self.pk).first() if self.pk else None
            if stored is None or stored.name != self.name or config_map.locked_changes(
                    self, stored, (*config_map.TOPIC_FIELDS, *config_map.BUDGET_FIELDS)):
                raise ValidationError(config_map.BRIDGE_REFUSAL.format(name=self.name) + (
                    "" if stored else " Adopt the topic from the overview once the bridge has created it."))
        try:
            self.engine_config()
        except InvalidArgument as exc:
            raise ValidationError(str(exc)) from None

    def engine_config(self, current: TopicConfig | None = None) -> TopicConfig:
        """The engine's configuration ``current`` (defaults when None) with this row's fields laid
        over it (services/config_map.py says which)."""
        return config_map.topic_config(self, current)

    def index_fields(self) -> list[str]:
        """The indexed fields, one per line of ``indexed_fields``, in order."""
        return [line.strip() for line in self.indexed_fields.splitlines() if line.strip()]

    def default_group_config(self, current: GroupConfig | None = None) -> GroupConfig:
        """The default group's configuration ``current`` with this row's dispatch limits laid over it."""
        return config_map.default_group_config(self, current)


class ConsumerGroup(DispatchLimits):
    """A consumer group of a topic besides its default group: it receives every message published
    to the topic after it was created, with its own retries, leases, dead letters and pause.
    Synced to the engine after commit like topics. Removing a row does not delete the group's
    messages in Redis: the group shows as unmanaged until ``python -m queue_core delete-group``
    releases them."""

    class OnExpire(models.TextChoices):
        DEAD = "dead", "dead letter (error Expired)"
        DROP = "drop", "drop silently"

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="groups")
    name = models.CharField(max_length=64, validators=[validate_group_name])
    description = models.TextField(blank=True)
    retry_policy = models.ForeignKey(RetryPolicy, on_delete=models.PROTECT, related_name="groups")
    visibility_timeout = models.FloatField(default=30.0, validators=[MinValueValidator(0.01)],
                                           help_text="Seconds a claimed message stays leased without ack.")
    dead_max_count = models.PositiveIntegerField(default=100_000,
                                                 help_text="Dead letters kept; older ones are evicted (archived).")
    dead_max_age = models.FloatField(default=14 * 86400, validators=[MinValueValidator(0)],
                                     help_text="Seconds a dead letter is kept; 0 = forever.")
    ordered = models.BooleanField(default=False, help_text="At most one message per ordering key in flight, "
                                                           "in publish order.")
    ttl = models.FloatField(default=0, validators=[MinValueValidator(0)],
                            help_text="Default time to live in seconds of messages published without one; 0 = none.")
    on_expire = models.CharField(max_length=8, choices=OnExpire.choices, default=OnExpire.DEAD)
    paused = models.BooleanField(default=False, help_text="Workers of this group stop claiming.")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)
    synced_at = models.DateTimeField(null=True, blank=True, editable=False)
    sync_error = models.TextField(blank=True, editable=False)

    class Meta:
        ordering = ["topic__name", "name"]
        constraints = [models.UniqueConstraint(fields=["topic", "name"], name="delayq_group_unique_per_topic")]

    def __str__(self) -> str:
        return f"{self.topic.name} / {self.name}" if self.topic_id else self.name

    def clean(self) -> None:
        try:
            # The admin's inline sets the topic being saved (its new partition count, even unsaved).
            partitions = self.topic.partitions or 1
        except ConsumerGroup.topic.RelatedObjectDoesNotExist:
            partitions = 1   # the form reports the missing topic itself
        limit_problems = self.limit_problems(partitions)
        if limit_problems:
            raise ValidationError(limit_problems)
        if self.retry_policy_id is None:
            return   # the form reports the missing field (see Topic.clean)
        if self.topic_id and is_bridge_topic(self.topic.name):
            stored = ConsumerGroup.objects.filter(pk=self.pk).first() if self.pk else None
            if stored is None or config_map.locked_changes(self, stored, config_map.GROUP_FIELDS + ("name",)):
                raise ValidationError(config_map.BRIDGE_REFUSAL.format(name=self.topic.name))
        try:
            self.engine_config()
        except InvalidArgument as exc:
            raise ValidationError(str(exc)) from None

    def engine_config(self, current: GroupConfig | None = None) -> GroupConfig:
        """As Topic.engine_config, for the group."""
        return config_map.group_config(self, current)


class QueueAccess(models.Model):
    """Holds the dashboard's permissions; no table. delayq's role groups get them (roles.py)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_queue", "See topics, counts and messages (payloads redacted)"),
            ("view_payload", "See payloads unredacted (each reveal is audited)"),
            ("replay_message", "Replay dead letters, deliver now"),
            ("delete_message", "Delete or cancel messages"),
            ("purge_topic", "Purge a whole state of a topic"),
            ("manage_topics", "Create, change, pause and adopt topics and retry policies"),
            ("run_analytics", "Start an analytics run (the Spark job) from the dashboard"),
            ("publish_message", "Publish messages (the topic page's Publish form and the JSON API)"),
        ]


class ApiToken(models.Model):
    """A personal token for the JSON API: ``Authorization: Bearer <token>`` acts as its owner, with
    the owner's permissions at the time of each request. Only a SHA-256 digest of the token is
    stored (the token is random, so no salt or slow hash is needed); the token itself is shown once,
    when it is created. Revoking keeps the row, so the audit trail can still name it.

    A token may be narrowed (never widened): ``access`` read-only or publish-only, ``topics`` a
    list of topic names (empty: every topic). It ends with its owner's password: ``password_digest``
    is the SHA-256 of the owner's password *hash* when the token was made, and a token whose owner's
    hash has changed since is refused, like Django's own sessions (a new password, or a rehash on a
    hasher upgrade, ends it). Plain SHA-256, not an HMAC of SECRET_KEY, so rotating SECRET_KEY does
    not end every token. An inactive owner's tokens are refused too."""

    PREFIX = "dq_"

    class Access(models.TextChoices):
        FULL = "full", "the owner's permissions"
        READ = "read", "read only"
        PUBLISH = "publish", "publish only"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="delayq_api_tokens")
    name = models.CharField(max_length=100, help_text="What the token is for, e.g. the producer that uses it.")
    prefix = models.CharField(max_length=16, editable=False, help_text="The token's first characters, to tell "
                                                                        "tokens apart (not secret, not enough to use).")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField(null=True, blank=True, help_text="Optional: refused from then on.")
    last_used = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.DateTimeField(null=True, blank=True, editable=False)
    access = models.CharField(max_length=10, choices=Access.choices, default=Access.FULL,
                              help_text="What the token may do, within its owner's permissions.")
    topics = models.JSONField(default=list, blank=True, help_text="The topics it may use; empty: every topic.")
    password_digest = models.CharField(max_length=64, editable=False, default="",
                                       help_text="SHA-256 of the owner's password hash at creation: a changed "
                                                 "password ends the token.")

    class Meta:
        verbose_name = "API token"
        ordering = ["-created"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def digest_of(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    def issue(self) -> str:
        """Give this (unsaved) token its secret, bound to the owner's current password; returns the
        secret, which is not kept."""
        secret = self.PREFIX + secrets.token_urlsafe(32)
        self.prefix, self.digest = secret[:len(self.PREFIX) + 6], self.digest_of(secret)
        self.password_digest = self.digest_of(self.user.password or "")
        return secret

    @property
    def scope_words(self) -> str:
        """The scope in words, for the tokens page and the audit: "read only; topics a, b"."""
        topics = f"topics {', '.join(self.topics)}" if self.topics else "every topic"
        return f"{self.get_access_display()}; {topics}"

    def allows_topic(self, name: str) -> bool:
        return not self.topics or name in self.topics

    @classmethod
    def authenticate(cls, secret: str) -> "ApiToken | None":
        """The live token with this secret (its owner active, with the password it was made
        under), its last use recorded; else None."""
        token = cls.objects.select_related("user").filter(digest=cls.digest_of(secret)).first()
        if token is None or token.state != "active" or not token.user.is_active:
            return None
        token.last_used = timezone.now()
        cls.objects.filter(pk=token.pk).update(last_used=token.last_used)
        return token

    def revoke(self) -> bool:
        """Revoke now; False when it was revoked already (by a concurrent click, say)."""
        now = timezone.now()
        done = bool(ApiToken.objects.filter(pk=self.pk, revoked__isnull=True).update(revoked=now))
        if done:
            self.revoked = now
        return done

    @property
    def state(self) -> str:
        if self.revoked:
            return "revoked"
        if self.expires and self.expires <= timezone.now():
            return "expired"
        if self.password_digest != self.digest_of(self.user.password or ""):
            return "ended: password changed"
        return "active"


class Role(models.Model):
    """An auth group delayq created for one of its roles; only these are ever changed or removed."""

    role = models.CharField(max_length=20, unique=True)
    group = models.OneToOneField("auth.Group", on_delete=models.CASCADE, related_name="delayq_role")

    def __str__(self) -> str:
        return f"{self.role}: {self.group.name}"


class AppendOnly(models.Model):
    """Rows are written once and never changed or deleted through the ORM."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None and type(self).objects.filter(pk=self.pk).exists():
            raise ValidationError(f"{type(self).__name__} rows are append-only; they cannot be edited.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValidationError(f"{type(self).__name__} rows are append-only; they cannot be deleted.")


class AuditEntry(AppendOnly):
    class Result(models.TextChoices):
        OK = "ok"
        PARTIAL = "partial"
        REFUSED = "refused"
        ERROR = "error"
        FAILED = "failed"              # nothing of a batch was done (the JSON API's publish)
        UNCONFIRMED = "unconfirmed"    # done on the Redis master, not acknowledged by enough replicas

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    username = models.CharField(max_length=150, help_text="Kept even if the user is deleted.")
    action = models.CharField(max_length=64, db_index=True)
    topic = models.CharField(max_length=128, blank=True, db_index=True)
    group = models.CharField(max_length=64, blank=True, db_index=True, help_text="The consumer group acted on.")
    scope = models.JSONField(default=dict, blank=True, help_text="What the action applied to (filter, error group, ...).")
    requested = models.PositiveIntegerField(null=True, blank=True)
    affected = models.PositiveIntegerField(null=True, blank=True)
    message_ids = models.JSONField(default=list, blank=True)
    result = models.CharField(max_length=16, choices=Result.choices, default=Result.OK)
    detail = models.TextField(blank=True)
    private = models.JSONField(default=dict, blank=True,
                               help_text="Unredacted details (an edit's full diff): shown only to users with "
                                         "view_payload, each view audited; never in the admin.")

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.topic}"


class BulkOperation(models.Model):
    """A long-running bulk action (replay all matching, purge, reschedule all, kill all) executed by
    a Celery task."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        CANCELLED = "cancelled"
        FAILED = "failed"

    # Its kind (operation_kinds.KINDS: permission, words, batch, moved label).
    action = models.CharField(max_length=16, choices=operation_kinds.CHOICES, default="replay")
    topic = models.CharField(max_length=128, db_index=True)
    group = models.CharField(max_length=64, default=DEFAULT_GROUP, help_text="The consumer group it acts on.")
    scope = models.JSONField(default=dict, blank=True, help_text="fingerprint / time range / state it covers.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    total = models.PositiveIntegerField(default=0, help_text="Count at preview time.")
    moved = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0, help_text="No longer dead when reached.")
    failed = models.PositiveIntegerField(default=0)
    rate_limit = models.PositiveIntegerField(default=500, help_text="Messages per second at most.")
    batch_size = models.PositiveIntegerField(default=100)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True, help_text="Last progress write by its task.")
    cancelled_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    error = models.TextField(blank=True)
    cursor = models.CharField(max_length=64, blank=True,
                              help_text="Where a resumed run continues (kinds that keep one: a backfill's last tick).")
    runner = models.CharField(max_length=32, blank=True, default="",
                              help_text="The task run that holds the operation: another run takes it only once "
                                        "the heartbeat is stale, so two never work on one operation at once.")
    scope_token = models.CharField(max_length=64, null=True, blank=True, unique=True,
                                   help_text="SHA-256 of the signed preview that started it, for kinds whose "
                                             "preview starts one operation only (a backfill).")
    canary = models.JSONField(default=dict, blank=True, help_text="A replay started as a canary (dashboard/canary.py): "
                              "its thresholds, the ids it replayed first, their outcome and the decision.")

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.action} #{self.pk} of {self.topic}/{self.group} ({self.status})"

    @property
    def active(self) -> bool:
        return self.status in (self.Status.PENDING, self.Status.RUNNING)

    @property
    def progress(self) -> int:
        """Percent done, 0-100."""
        done = self.moved + self.skipped + self.failed
        return 100 if self.status == self.Status.DONE else min(100, round(100 * done / self.total)) if self.total else 0

    @property
    def kind(self) -> operation_kinds.OperationKind:
        return operation_kinds.KINDS[self.action]

    @property
    def resume_refused(self) -> str:
        """Why it must not be resumed ("" when it may be): a replay whose canary failed stays
        stopped, so the rest of its scope stays dead, untouched (the page offers no Resume and
        actions.resume_operation refuses the POST)."""
        if self.canary.get("verdict") == "failed":
            return (f"Operation #{self.pk}'s canary failed, so the rest of its dead letters stay dead, untouched; "
                    "resuming it would not replay them. Fix what makes them fail, then start a new replay from the "
                    "dead tab (with a canary again, if you like).")
        return ""

    @property
    def permission(self) -> str:
        """What starting, cancelling or resuming it takes."""
        return self.kind.permission_for(self.scope)

    @property
    def moved_label(self) -> str:
        return self.kind.moved_label

    @property
    def words(self) -> str:
        """Its scope in words, in its own group whatever the scope says."""
        return self.kind.words(self.topic, {**self.scope, "group": self.group})


from .models_alerts import AlertEvent, AlertRule  # noqa: E402,F401
from .models_analytics import AnalyticsRun, AttemptStat, ErrorGroupStat, LateCauseStat, MinuteStat, TimingStat  # noqa: E402,F401
