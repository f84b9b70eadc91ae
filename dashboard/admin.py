"""Admin for topics and retry policies (manage_topics), and the read-only audit trail."""

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.db import transaction
from django.forms import ModelChoiceField
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from . import audit, services
from .durations import SECONDS_FIELDS, SecondsInput
from .models import (
    AlertEvent,
    AlertRule,
    ApiToken,
    AuditEntry,
    BulkOperation,
    ConsumerGroup,
    RetryPolicy,
    Topic,
)
from .services import config_map
from .services.contracts import DEFAULT_GROUP, Unavailable, is_bridge_topic


class ManageTopicsPermission:
    """Changing topics and policies takes manage_topics; seeing them, view_queue or manage_topics."""

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("delayq.view_queue") or self.has_change_permission(request, obj)

    def has_add_permission(self, request):
        return request.user.has_perm("delayq.manage_topics")

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("delayq.manage_topics")

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm("delayq.manage_topics")

    def has_module_permission(self, request):
        return self.has_view_permission(request)


class SecondsInWords:
    """Seconds fields keep their number input and say the saved value in words beside it."""

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name in SECONDS_FIELDS:
            kwargs["widget"] = SecondsInput
        return super().formfield_for_dbfield(db_field, request, **kwargs)


def _shown(form, name: str, value) -> str:
    field = form.fields.get(name)
    if isinstance(field, ModelChoiceField) and value is not None and not hasattr(value, "pk"):
        value = field.queryset.filter(pk=value).first()   # the form's initial value is the primary key
    return str(value)


def _changed(form) -> dict:
    """Every field the save changed, as 'before -> after' (a JSON field the form calls changed
    while it holds the same value is left out)."""
    pairs = {name: (_shown(form, name, form.initial.get(name)), _shown(form, name, form.cleaned_data.get(name)))
             for name in form.changed_data}
    return {name: f"{before} -> {after}" for name, (before, after) in pairs.items() if before != after}


def _words(changed: dict) -> str:
    return "; ".join(f"{name}: {change}" for name, change in changed.items())


# A Celery bridge topic's configuration is the bridge's (config_map.BRIDGE_REFUSAL says why).
BRIDGE_LOCKED_TOPIC = ["name", "retry_policy", "indexed_fields", *(f for f in config_map.TOPIC_FIELDS if f not in config_map.BRIDGE_FIELDS),
                       *config_map.LIMIT_FIELDS, *config_map.BUDGET_FIELDS]


def _build_indexes(request, topic):
    """After the sync declared them: an indexed field the topic's messages are not yet listed in
    is built by a background operation (progress on the Operations page; queries scan meanwhile)."""
    from .actions import start_operation
    from .operation_kinds import KINDS

    topic.refresh_from_db()
    if topic.sync_error or BulkOperation.objects.filter(
            topic=topic.name, action="index_build",
            status__in=(BulkOperation.Status.PENDING, BulkOperation.Status.RUNNING)).exists():
        return     # not synced, or a build already under way
    try:
        if not any(not i["ready"] for i in services.indexes(topic.name)):
            return
        scope, total = services.build_scope(topic.name)
    except Unavailable as exc:
        messages.error(request, f"{topic.name}: the indexed fields could not be read ({exc}); save again to build them.")
        return
    op = start_operation(request, topic.name, DEFAULT_GROUP, KINDS["index_build"], scope, total, 50_000)
    if op is not None:
        messages.info(request, format_html('{}: building its indexed fields over {} messages in the background '
                                           '(<a href="{}">operation #{}</a>); queries scan until it is done.',
                                           topic.name, f"{total:,}", reverse("delayq:operation", args=[op.pk]), op.pk))


def _report_sync_after_commit(request, topic_ids):
    """Tell the admin user how the sync went, once the on-commit sync has run."""
    def report():
        for topic in Topic.objects.filter(pk__in=list(topic_ids)):
            if topic.sync_error:
                messages.error(request, f"{topic.name}: {topic.sync_error}")
    transaction.on_commit(report)


@admin.register(RetryPolicy)
class RetryPolicyAdmin(ManageTopicsPermission, SecondsInWords, admin.ModelAdmin):
    list_display = ["name", "kind", "max_attempts", "preview", "topic_count"]
    list_filter = ["kind"]
    search_fields = ["name", "description"]
    readonly_fields = ["preview", "created", "updated"]
    fields = ["name", "kind", "base_delay", "factor", "max_delay", "schedule", "jitter", "max_attempts",
              "preview", "description", "created", "updated"]

    @admin.display(description="topics")
    def topic_count(self, obj):
        return obj.topics.count()

    def delete_model(self, request, obj):
        audit.record(request.user, "policy.delete", scope={"policy": obj.name}, detail=obj.preview)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            audit.record(request.user, "policy.delete", scope={"policy": obj.name, "via": "bulk delete"},
                         detail=obj.preview)
        super().delete_queryset(request, queryset)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        changed = _changed(form)
        audit.record(request.user, "policy.change" if change else "policy.create", scope={
            "policy": obj.name, "changed": changed}, detail=f"{_words(changed)}. Now: {obj.preview}")
        _report_sync_after_commit(request, obj.topics.values_list("pk", flat=True))


# The dispatch limits' place in a form: a rate's count and period side by side.
LIMITS_LAYOUT = [("rate_count", "rate_period"), "max_in_flight", ("key_rate_count", "key_rate_period"),
                 "max_in_flight_per_key", "fairness_weights"]
LIMITS_DESCRIPTION = ("Blank means no limit. Running workers apply a change at their next claim (no restart). "
                      "A message a limit holds back stays ready and says why on its page.")


BUDGET_DESCRIPTION = ("Blank means no budget. Above a budget, publishing to this topic is refused (TopicFull; the API "
                      "answers 507) instead of Redis failing every write once maxmemory is reached. Each partition "
                      "holds up to its share, the limit / partitions rounded up (so up to limit + partitions - 1 "
                      "in all). Messages held for undo count. The topic page's Memory section shows the use.")


def _limits_changed(changed: dict, row) -> str:
    """' Limits now: ...' when the save changed a dispatch limit (for the audit's detail)."""
    return f" Limits now: {row.limits_in_words}." if set(changed) & set(config_map.LIMIT_FIELDS) else ""


class ConsumerGroupInline(SecondsInWords, admin.StackedInline):
    """The topic's groups besides the default one (whose settings are the topic's own)."""

    model = ConsumerGroup
    extra = 0
    fieldsets = [(None, {"fields": [("name", "retry_policy", "paused"), ("visibility_timeout", "ordered"),
                                    ("dead_max_count", "dead_max_age"), ("ttl", "on_expire"), "sync_error"]}),
                 ("Dispatch limits", {"fields": LIMITS_LAYOUT, "description": LIMITS_DESCRIPTION})]
    readonly_fields = ["sync_error"]

    def get_formset(self, request, obj=None, **kwargs):
        """A group added to a topic starts with the topic's retry policy (``obj`` is the topic)."""
        formset = super().get_formset(request, obj, **kwargs)
        policy = formset.form.base_fields.get("retry_policy")
        if obj is not None and obj.retry_policy_id and policy is not None:
            policy.initial = obj.retry_policy_id     # a form class made for this request: not shared
        return formset

    def get_readonly_fields(self, request, obj=None):
        """``obj`` is the topic: a Celery bridge topic's groups may only be paused or resumed."""
        if obj is not None and is_bridge_topic(obj.name):
            return [f for f in flatten_fieldsets(self.fieldsets) if f not in config_map.BRIDGE_FIELDS]
        return self.readonly_fields

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("delayq.view_queue") or request.user.has_perm("delayq.manage_topics")

    def has_add_permission(self, request, obj=None):
        return request.user.has_perm("delayq.manage_topics") and not (obj and is_bridge_topic(obj.name))

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm("delayq.manage_topics")

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm("delayq.manage_topics") and not (obj and is_bridge_topic(obj.name))


@admin.register(Topic)
class TopicAdmin(ManageTopicsPermission, SecondsInWords, admin.ModelAdmin):
    inlines = [ConsumerGroupInline]
    list_display = ["name", "owner", "retry_policy", "partitions", "group_names", "paused", "events", "sync_status"]
    list_filter = ["paused", "events", "retry_policy", "owner"]
    search_fields = ["name", "owner", "description"]
    readonly_fields = ["retry_preview", "index_state", "topic_schedules", "created", "updated", "synced_at",
                       "sync_error"]
    actions = ["sync_selected", "pause_selected", "resume_selected"]

    @admin.display(description="indexes")
    def index_state(self, obj):
        """Each indexed field as the engine has it: ready, or still being built."""
        if obj is None or not obj.pk:
            return "—"
        try:
            rows = services.indexes(obj.name)
        except Unavailable:
            return "Redis is unreachable: the indexes cannot be read now."
        if not rows:
            return "None declared in Redis."
        return format_html_join(", ", "{} ({})", ((r["field"], "ready" if r["ready"] else "being built") for r in rows))

    @admin.display(description="schedules")
    def topic_schedules(self, obj):
        """The topic's schedules (queue_core's, kept in Redis): each in words with its state and
        next tick; the Schedules page, filtered to this topic, acts on them."""
        if obj is None or not obj.pk:
            return "—"
        try:
            rows = [r for r in services.schedules(obj.name) if r["topic"] == obj.name]
        except Unavailable:
            return "Redis is unreachable: the schedules cannot be read now."
        link = format_html('<a href="{}?{}">Schedules page</a>', reverse("delayq:schedules"), urlencode({"q": obj.name}))
        if not rows:
            return format_html("None. Add them with upsert_schedule() or delayq schedule add; see the {}.", link)
        items = format_html_join("", "<li>{} [{}]: {}, next {}</li>", (
            (r["name"], r["state"], r["words"], r["next"][0].strftime("%Y-%m-%d %H:%M:%S UTC") if r["next"] else "—")
            for r in rows))
        return format_html("<ul>{}</ul>{}", items, link)

    @admin.display(description="groups")
    def group_names(self, obj):
        return ", ".join(["default", *(g.name for g in obj.groups.all())])

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("groups")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and is_bridge_topic(obj.name):
            return ["bridge_note", *BRIDGE_LOCKED_TOPIC, *self.readonly_fields]
        return self.readonly_fields

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        return ["bridge_note", *(f for f in fields if f != "bridge_note")] if "bridge_note" in fields else fields

    def get_fieldsets(self, request, obj=None):
        """The topic's own fields, then its memory budget and its default group's dispatch limits in
        sets of their own."""
        apart = {*config_map.LIMIT_FIELDS, *config_map.BUDGET_FIELDS}
        rest = [f for f in self.get_fields(request, obj) if f not in apart]
        return [(None, {"fields": rest}),
                ("Memory budget", {"fields": [config_map.BUDGET_FIELDS], "description": BUDGET_DESCRIPTION}),
                ("Dispatch limits of the default group", {"fields": LIMITS_LAYOUT,
                                                          "description": LIMITS_DESCRIPTION})]

    @admin.display(description="configuration")
    def bridge_note(self, obj):
        return config_map.BRIDGE_REFUSAL.format(name=obj.name)

    def save_formset(self, request, form, formset, change):
        """Each added, changed or removed group is audited; removing a row leaves its messages in
        Redis (the group shows as unmanaged until deleted with queue_core's delete-group)."""
        super().save_formset(request, form, formset, change)
        topic = form.instance.name
        for group in formset.new_objects:
            audit.record(request.user, "group.create", topic=topic, group=group.name,
                         detail=f"Limits: {group.limits_in_words}.")
        forms = {f.instance.pk: f for f in formset.forms}
        for group, changed in formset.changed_objects:
            before_after = {name: diff for name, diff in _changed(forms[group.pk]).items() if name in changed}
            audit.record(request.user, "group.change", topic=topic, group=group.name,
                         scope={"changed": before_after}, detail=_words(before_after) + _limits_changed(before_after, group))
        for group in formset.deleted_objects:
            audit.record(request.user, "group.delete", topic=topic, group=group.name,
                         detail="Row deleted; the group and its messages stay in Redis (now unmanaged).")

    @admin.display(description="retry schedule")
    def retry_preview(self, obj):
        return obj.retry_policy.preview if obj and obj.retry_policy_id else "—"

    @admin.display(description="sync")
    def sync_status(self, obj):
        if obj.sync_error:
            return format_html('<span style="color:#b91c1c" title="{}">failed</span>', obj.sync_error)
        return "ok" if obj.synced_at else "pending"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        changed = _changed(form)
        audit.record(request.user, "topic.change" if change else "topic.create", topic=obj.name,
                     scope={"changed": changed}, detail=_words(changed) + _limits_changed(changed, obj))
        _report_sync_after_commit(request, [obj.pk])
        if obj.indexed_fields.strip():   # also when unchanged: a build a failure cut short starts again
            transaction.on_commit(lambda: _build_indexes(request, obj))

    def delete_model(self, request, obj):
        audit.record(request.user, "topic.delete", topic=obj.name,
                     detail="Row deleted; the topic and its messages stay in Redis (now unmanaged).")
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        """The changelist's "delete selected": one audit entry per topic, as for a single delete."""
        for obj in queryset:
            audit.record(request.user, "topic.delete", topic=obj.name, scope={"via": "bulk delete"},
                         detail="Row deleted; the topic and its messages stay in Redis (now unmanaged).")
        super().delete_queryset(request, queryset)

    @admin.action(description="Sync selected topics to Redis now", permissions=["change"])
    def sync_selected(self, request, queryset):
        errors = [t.name for t in queryset.select_related("retry_policy") if services.sync_topic(t)]
        count = queryset.count()
        audit.record(request.user, "topic.sync", scope={"topics": [t.name for t in queryset]}, requested=count,
                     affected=count - len(errors), result="partial" if errors else "ok",
                     detail=f"failed: {', '.join(errors)}" if errors else "")
        if errors:
            self.message_user(request, f"Sync failed for {', '.join(errors)}: Redis is unreachable; the previous "
                                       "configuration stays in force.", messages.ERROR)
        else:
            self.message_user(request, f"Synced {count} topic(s).", messages.SUCCESS)

    def _set_paused(self, request, queryset, paused: bool):
        names = list(queryset.values_list("name", flat=True))
        for topic in queryset:
            topic.paused = paused
            topic.save(update_fields=["paused", "updated"])
        audit.record(request.user, "topic.pause" if paused else "topic.resume",
                     scope={"topics": names}, requested=len(names), affected=len(names))
        _report_sync_after_commit(request, queryset.values_list("pk", flat=True))
        self.message_user(request, f"{'Paused' if paused else 'Resumed'} {', '.join(names)}.", messages.SUCCESS)

    @admin.action(description="Pause selected topics (workers stop claiming)", permissions=["change"])
    def pause_selected(self, request, queryset):
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume selected topics", permissions=["change"])
    def resume_selected(self, request, queryset):
        self._set_paused(request, queryset, False)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ["at", "username", "action", "topic", "group", "requested", "affected", "result"]
    list_filter = ["action", "result", "topic", "group"]
    search_fields = ["username", "action", "topic", "detail"]
    date_hierarchy = "at"
    exclude = ["private"]   # unredacted: only the audit page's audited reveal shows it


@admin.register(BulkOperation)
class BulkOperationAdmin(ReadOnlyAdmin):
    list_display = ["id", "topic", "group", "status", "total", "moved", "skipped", "failed", "created_by", "created"]
    list_filter = ["status", "topic"]
    search_fields = ["topic"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Every user's tokens, for an administrator to see and revoke (users create their own on the
    API tokens page; the secret is never stored, so it cannot be shown here)."""
    list_display = ["name", "user", "prefix", "state", "created", "expires", "last_used", "revoked"]
    list_filter = ["revoked"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["user", "name", "prefix", "created", "expires", "last_used", "revoked"]
    actions = ["revoke_selected"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False     # revoked tokens stay, so the audit trail can name them

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_selected(self, request, queryset):
        revoked = [token for token in queryset.select_related("user") if token.revoke()]
        for token in revoked:
            audit.record(request.user, "token.revoke", scope={"token": str(token), "owner": token.user.get_username()})
        self.message_user(request, f"Revoked {len(revoked)} token(s).", messages.SUCCESS)


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    """Thresholds per topic and group; evaluated every minute by the delayq.evaluate_alerts beat task."""
    list_display = ["topic", "group", "kind", "threshold", "enabled", "firing_since", "last_value", "last_checked",
                    "last_error"]
    list_filter = ["kind", "enabled"]
    search_fields = ["topic__name", "group"]
    readonly_fields = ["firing_since", "last_value", "last_checked", "last_error"]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit.record(request.user, "alert.change" if change else "alert.add", topic=obj.topic.name, group=obj.group,
                     scope={"rule": str(obj), "webhook": bool(obj.webhook_url), "email": obj.email_to})

    def delete_model(self, request, obj):
        audit.record(request.user, "alert.delete", topic=obj.topic.name, group=obj.group, scope={"rule": str(obj)})
        super().delete_model(request, obj)


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    """The history: each start and end of an alert and whether it was delivered (read-only)."""
    list_display = ["at", "summary", "change", "delivery_state", "attempts", "last_error"]
    list_filter = ["change", "rule__topic"]
    readonly_fields = [f.name for f in AlertEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
