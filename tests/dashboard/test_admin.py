import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, ConsumerGroup, RetryPolicy, Topic

pytestmark = pytest.mark.django_db

# The consumer-group inline's management form, as the admin page sends it with no group rows.
INLINE_EMPTY = {"groups-TOTAL_FORMS": "0", "groups-INITIAL_FORMS": "0"}
TOPIC_FORM = {"name": "a", "visibility_timeout": "30", "max_payload_bytes": "1048576", "dead_max_count": "100000",
              "dead_max_age": "1209600", "events": "on", "redaction_rules": "[]", "description": "", "owner": "",
              "partitions": "1"}


def group_form(**fields) -> dict:
    row = {"name": "billing", "visibility_timeout": "60", "dead_max_count": "500", "dead_max_age": "3600",
           "ttl": "0", "on_expire": "dead", **fields}
    return {"groups-TOTAL_FORMS": "1", "groups-INITIAL_FORMS": "0",
            **{f"groups-0-{k}": v for k, v in row.items()}}


@pytest.fixture
def topics(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p", kind="exponential", jitter=0)
    with django_capture_on_commit_callbacks(execute=True):
        return [Topic.objects.create(name=n, retry_policy=policy) for n in ("a", "b")]


@pytest.mark.parametrize("url", [
    "admin:delayq_topic_changelist", "admin:delayq_topic_add", "admin:delayq_retrypolicy_changelist",
    "admin:delayq_retrypolicy_add", "admin:delayq_auditentry_changelist",
    "admin:delayq_bulkoperation_changelist",
])
def test_it_loads_admin_pages(admin_user, topics, url):
    assert admin_user.get(reverse(url)).status_code == 200


def test_it_shows_the_preview_on_the_policy_page(admin_user, topics):
    policy = RetryPolicy.objects.get()
    html = admin_user.get(reverse("admin:delayq_retrypolicy_change", args=[policy.pk])).content.decode()
    assert policy.preview in html


def test_it_refuses_editing_the_audit_trail(admin_user):
    entry = AuditEntry.objects.create(username="x", action="t")
    assert admin_user.get(reverse("admin:delayq_auditentry_add")).status_code == 403
    response = admin_user.post(reverse("admin:delayq_auditentry_change", args=[entry.pk]), {"action": "x"})
    assert response.status_code == 403


def test_it_runs_pause_resume_and_sync_actions_with_audit(admin_user, topics, site_queue,
                                                          django_capture_on_commit_callbacks):
    url = reverse("admin:delayq_topic_changelist")
    ids = [str(t.pk) for t in topics]
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(url, {"action": "pause_selected", "_selected_action": ids})
    assert response.status_code == 302
    assert site_queue.topic_config("a").paused and site_queue.topic_config("b").paused
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(url, {"action": "resume_selected", "_selected_action": ids})
    assert not site_queue.topic_config("a").paused
    site_queue.redis.delete(site_queue.keys("a").config)
    admin_user.post(url, {"action": "sync_selected", "_selected_action": ids})
    assert site_queue.is_configured("a")
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"topic.pause", "topic.resume", "topic.sync"} <= actions


def test_it_audits_changes_made_in_the_admin(admin_user, topics, site_queue, django_capture_on_commit_callbacks):
    topic = topics[0]
    url = reverse("admin:delayq_topic_change", args=[topic.pk])
    data = {"name": "a", "retry_policy": topic.retry_policy_id, "visibility_timeout": "45",
            "max_payload_bytes": "1048576", "dead_max_count": "100000", "dead_max_age": "1209600",
            "events": "on", "redaction_rules": "[]", "description": "", "owner": "team-x", "partitions": "1",
            **INLINE_EMPTY}
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(url, data)
    assert response.status_code == 302, response.content[:2000]
    assert site_queue.topic_config("a").visibility_timeout == 45
    entry = AuditEntry.objects.get(action="topic.change")
    assert entry.username == "boss" and entry.scope["changed"]["visibility_timeout"] == "45.0"


def test_viewer_cannot_change_topics_in_admin(viewer, topics):
    assert viewer.get(reverse("admin:delayq_topic_add")).status_code in (302, 403)


def test_bulk_delete_in_the_admin_is_audited_per_row(admin_user, topics):
    url = reverse("admin:delayq_topic_changelist")
    response = admin_user.post(url, {"action": "delete_selected", "_selected_action": [t.pk for t in topics],
                                     "post": "yes"})
    assert response.status_code == 302 and not Topic.objects.exists()
    entries = AuditEntry.objects.filter(action="topic.delete").order_by("topic")
    assert [(e.topic, e.scope.get("via"), e.username) for e in entries] == [("a", "bulk delete", "boss"),
                                                                             ("b", "bulk delete", "boss")]
    policy = RetryPolicy.objects.get()
    admin_user.post(reverse("admin:delayq_retrypolicy_changelist"),
                    {"action": "delete_selected", "_selected_action": [policy.pk], "post": "yes"})
    assert not RetryPolicy.objects.exists()
    assert AuditEntry.objects.get(action="policy.delete").scope == {"policy": "p", "via": "bulk delete"}


def test_adding_a_topic_without_a_retry_policy_is_a_form_error_not_a_500(admin_user):
    response = admin_user.post(reverse("admin:delayq_topic_add"), {
        "name": "orders", "visibility_timeout": "30", "max_payload_bytes": "1048576", "dead_max_count": "100",
        "dead_max_age": "0", "redaction_rules": "[]"})
    assert response.status_code == 200
    assert "retry_policy" in response.context["adminform"].form.errors
    assert "This field is required." in response.content.decode()
    assert not Topic.objects.exists()


def test_a_group_added_in_the_admin_is_synced_to_the_engine_and_audited(admin_user, topics, site_queue,
                                                                        django_capture_on_commit_callbacks):
    topic = topics[0]
    fast = RetryPolicy.objects.create(name="fast", kind="fixed", base_delay=2, max_attempts=3, jitter=0)
    data = {**TOPIC_FORM, "retry_policy": topic.retry_policy_id,
            **group_form(retry_policy=str(fast.pk), ordered="on", ttl="90")}
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(reverse("admin:delayq_topic_change", args=[topic.pk]), data)
    assert response.status_code == 302, response.content[:3000]
    assert site_queue.groups("a") == ["default", "billing"]
    cfg = site_queue.group_config("a", "billing")
    assert (cfg.visibility_timeout, cfg.dead_max_count, cfg.ordered, cfg.ttl) == (60, 500, True, 90)
    assert cfg.retry.max_attempts == 3 and cfg.retry.kind == "fixed"
    assert site_queue.topic_config("a").retry.max_attempts == 5          # the default group keeps the topic's
    entry = AuditEntry.objects.get(action="group.create")
    assert (entry.topic, entry.group, entry.username) == ("a", "billing", "boss")
    assert ConsumerGroup.objects.get().synced_at is not None
    # A change of the group's policy reaches the engine too (the policy's own save syncs its groups).
    fast.max_attempts = 7
    with django_capture_on_commit_callbacks(execute=True):
        fast.save()
    assert site_queue.group_config("a", "billing").retry.max_attempts == 7


def test_group_rows_without_a_policy_or_named_default_are_form_errors(admin_user, topics):
    topic = topics[0]
    url = reverse("admin:delayq_topic_change", args=[topic.pk])
    base = {**TOPIC_FORM, "retry_policy": topic.retry_policy_id}
    missing = admin_user.post(url, {**base, **group_form()})
    assert missing.status_code == 200 and "This field is required." in missing.content.decode()
    default = admin_user.post(url, {**base, **group_form(name="default", retry_policy=str(topic.retry_policy_id))})
    assert default.status_code == 200
    assert "The default group&#x27;s settings are the topic&#x27;s own" in default.content.decode()
    assert not ConsumerGroup.objects.exists()
