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
    assert entry.username == "boss"
    assert entry.scope["changed"] == {"visibility_timeout": "30.0 -> 45.0", "owner": " -> team-x"}


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


# -- Celery bridge topics, retry arithmetic, the audit's before -> after -------------------------

def _bridge_topic(q):
    """A bridge topic as the bridge leaves it, with a setting of its own and a second group."""
    from queue_core import RetryPolicy as EnginePolicy

    policy = EnginePolicy.exponential(base=1, factor=2, max_delay=60, max_attempts=20_000, jitter=0.1)
    q.configure_topic("celery.celery", retry=policy, visibility_timeout=120, history_max=50)
    q.configure_group("celery.celery", "audit", visibility_timeout=33, hold_key_on_dead=True)
    return q.topic_config("celery.celery"), q.group_config("celery.celery", "audit")


def test_finding_bridge_topic_configuration_editable_in_the_admin(admin_user, site_queue,
                                                                  django_capture_on_commit_callbacks):
    before, before_group = _bridge_topic(site_queue)
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_user.post(reverse("delayq:topic_adopt", args=["celery.celery"])).status_code == 302
    assert site_queue.topic_config("celery.celery") == before           # adopting changed nothing
    assert site_queue.group_config("celery.celery", "audit") == before_group
    topic, group = Topic.objects.get(), ConsumerGroup.objects.get()
    url = reverse("admin:delayq_topic_change", args=[topic.pk])
    page = admin_user.get(url)
    assert page.status_code == 200 and "belongs to the Celery bridge" in page.content.decode()
    assert "visibility_timeout" not in page.context["adminform"].form.fields          # shown read-only
    # A crafted POST changing the configuration changes nothing; pausing still works.
    data = {"visibility_timeout": "5", "partitions": "4", "retry_policy": "999", "paused": "on",
            "description": "the bridge", "owner": "", "redaction_rules": "[]",
            "groups-TOTAL_FORMS": "1", "groups-INITIAL_FORMS": "1", "groups-0-id": str(group.pk),
            "groups-0-topic": str(topic.pk), "groups-0-visibility_timeout": "1", "groups-0-paused": "on"}
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(url, data)
    assert response.status_code == 302, response.content[:3000]
    assert site_queue.topic_config("celery.celery") == before.replace(paused=True)
    assert site_queue.group_config("celery.celery", "audit") == before_group.replace(paused=True)
    topic.refresh_from_db()
    assert (topic.visibility_timeout, topic.partitions, topic.description) == (120, 1, "the bridge")
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_pause", args=["celery.celery"]), {"paused": "0"})
    assert site_queue.topic_config("celery.celery") == before


def test_finding_bridge_topic_created_or_its_policy_edited_in_the_admin(admin_user, site_queue,
                                                                        django_capture_on_commit_callbacks):
    before, _ = _bridge_topic(site_queue)
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_adopt", args=["celery.celery"]))
    policy = Topic.objects.get().retry_policy
    response = admin_user.post(reverse("admin:delayq_topic_add"), {
        **TOPIC_FORM, "name": "celery.other", "retry_policy": str(policy.pk), **INLINE_EMPTY})
    assert response.status_code == 200 and "belongs to the Celery bridge" in response.content.decode()
    assert not Topic.objects.filter(name="celery.other").exists() and "celery.other" not in site_queue.topics()
    response = admin_user.post(reverse("admin:delayq_retrypolicy_change", args=[policy.pk]), {
        "name": policy.name, "kind": "exponential", "base_delay": "1", "factor": "2", "max_delay": "60",
        "schedule": "[]", "jitter": "0.1", "max_attempts": "3", "description": ""})
    assert response.status_code == 200 and "belongs to the Celery bridge" in response.content.decode()
    policy.refresh_from_db()
    assert policy.max_attempts == 20_000 and site_queue.topic_config("celery.celery") == before


def test_finding_admin_pages_500_for_a_policy_with_many_attempts(admin_user, site_queue,
                                                                 django_capture_on_commit_callbacks):
    _bridge_topic(site_queue)
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_adopt", args=["celery.celery"]))
        extreme = RetryPolicy.objects.create(name="extreme", kind="exponential", factor=1e300, max_delay=0,
                                             max_attempts=2 ** 31 - 1)
        Topic.objects.create(name="extreme", retry_policy=extreme)
    for topic in Topic.objects.all():
        for url in (reverse("admin:delayq_topic_change", args=[topic.pk]),
                    reverse("admin:delayq_retrypolicy_change", args=[topic.retry_policy_id])):
            response = admin_user.get(url)
            assert response.status_code == 200, url
            assert f"then dead after {topic.retry_policy.max_attempts:,} attempts" in response.content.decode()
    for url in ("admin:delayq_topic_changelist", "admin:delayq_retrypolicy_changelist"):
        assert admin_user.get(reverse(url)).status_code == 200


def test_finding_audit_of_an_admin_save_lacks_the_before_values(admin_user, topics, site_queue,
                                                                django_capture_on_commit_callbacks):
    topic = topics[0]
    fast = RetryPolicy.objects.create(name="fast", kind="fixed", base_delay=2, max_attempts=3, jitter=0)
    url = reverse("admin:delayq_topic_change", args=[topic.pk])
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(url, {**TOPIC_FORM, "retry_policy": str(topic.retry_policy_id),
                              **group_form(retry_policy=str(fast.pk))})
    group = ConsumerGroup.objects.get()
    data = {**TOPIC_FORM, "retry_policy": str(fast.pk), "dead_max_count": "7",
            **group_form(retry_policy=str(fast.pk), ttl="90", **{"id": str(group.pk), "topic": str(topic.pk)}),
            "groups-INITIAL_FORMS": "1"}
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_user.post(url, data).status_code == 302
    change = AuditEntry.objects.filter(action="topic.change").first()   # the latest
    assert change.scope["changed"] == {"retry_policy": "p -> fast", "dead_max_count": "100000 -> 7"}
    assert "retry_policy: p -> fast" in change.detail
    assert AuditEntry.objects.get(action="group.change").scope["changed"] == {"ttl": "0.0 -> 90.0"}
    admin_user.post(reverse("admin:delayq_retrypolicy_change", args=[fast.pk]), {
        "name": "fast", "kind": "fixed", "base_delay": "2", "factor": "2", "max_delay": "300", "schedule": "[]",
        "jitter": "0", "max_attempts": "4", "description": ""})
    assert AuditEntry.objects.get(action="policy.change").scope["changed"] == {"max_attempts": "3 -> 4"}


def test_finding_new_consumer_group_has_no_default_retry_policy(admin_user, topics):
    """The admin's "add another group" row starts with the topic's own retry policy."""
    own = RetryPolicy.objects.create(name="own", kind="fixed", base_delay=5, jitter=0)
    topic = topics[1]
    topic.retry_policy = own
    topic.save()
    page = admin_user.get(reverse("admin:delayq_topic_change", args=[topic.pk]))
    empty = page.context["inline_admin_formsets"][0].formset.empty_form
    assert empty["retry_policy"].value() == own.pk
    assert f'<option value="{own.pk}" selected>own</option>' in page.content.decode()
    # The first topic's page offers its own policy, not the one seen last.
    first = admin_user.get(reverse("admin:delayq_topic_change", args=[topics[0].pk]))
    assert first.context["inline_admin_formsets"][0].formset.empty_form["retry_policy"].value() == topics[0].retry_policy_id


def test_finding_durations_in_raw_seconds_in_the_admin(admin_user, topics):
    """Seconds fields show their value in words beside the number, and the number without ".0"."""
    html = admin_user.get(reverse("admin:delayq_topic_change", args=[topics[0].pk])).content.decode()
    assert 'name="dead_max_age" value="1209600"' in html and "1209600.0" not in html
    assert '<span class="help seconds-in-words" data-testid="in-words">14 d</span>' in html
    assert '<span class="help seconds-in-words" data-testid="in-words">30 s</span>' in html
    policy = admin_user.get(reverse("admin:delayq_retrypolicy_change", args=[topics[0].retry_policy_id]))
    assert '<span class="help seconds-in-words" data-testid="in-words">5 min</span>' in policy.content.decode()
