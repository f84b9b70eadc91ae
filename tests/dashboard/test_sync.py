"""Saving topics and policies configures the engine; drift is detected and repaired."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from dashboard.models import AuditEntry, RetryPolicy, Topic
from queue_core import MessageState

pytestmark = pytest.mark.django_db


@pytest.fixture
def policy(db):
    return RetryPolicy.objects.create(name="fast", kind="fixed", base_delay=2, max_attempts=3, jitter=0)


def make_topic(policy, **kw):
    return Topic.objects.create(**{"name": "orders", "retry_policy": policy, **kw})


def test_saving_a_topic_writes_exactly_its_engine_config(site_queue, policy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy, visibility_timeout=7, dead_max_count=10)
    assert site_queue.topic_config("orders") == topic.engine_config()
    topic.refresh_from_db()
    assert topic.synced_at is not None and topic.sync_error == ""
    assert "orders" in site_queue.topics()


def test_saving_a_policy_resyncs_its_topics(site_queue, policy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        make_topic(policy)
        make_topic(policy, name="emails")
    with django_capture_on_commit_callbacks(execute=True):
        policy.max_attempts = 9
        policy.save()
    assert site_queue.topic_config("orders").retry.max_attempts == 9
    assert site_queue.topic_config("emails").retry.max_attempts == 9


def test_nothing_is_written_before_commit(site_queue, policy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        make_topic(policy)
    assert not site_queue.is_configured("orders")
    assert callbacks  # written only when the transaction commits


def test_redis_outage_is_recorded_and_the_next_sync_repairs(site_queue, policy, settings,
                                                             django_capture_on_commit_callbacks):
    good_url = settings.DELAYQ_REDIS_URL
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:1/0"
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy)
    topic.refresh_from_db()
    assert "Could not write the configuration to Redis" in topic.sync_error
    settings.DELAYQ_REDIS_URL = good_url
    assert not site_queue.is_configured("orders")
    call_command("dq_sync_topics")
    topic.refresh_from_db()
    assert topic.sync_error == ""
    assert site_queue.topic_config("orders") == topic.engine_config()


def test_drift_is_reported_and_repaired(site_queue, policy, capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy)
    site_queue.redis.hset(site_queue.keys("orders").g.config, "visibility_timeout_ms", "99000")
    with pytest.raises(CommandError, match="1 topic"):
        call_command("dq_sync_topics", "--check")
    assert "visibility_timeout: Redis has 99.0, database has 30.0" in capsys.readouterr().out
    assert site_queue.topic_config("orders").visibility_timeout == 99  # --check changes nothing
    call_command("dq_sync_topics")
    assert site_queue.topic_config("orders") == topic.engine_config()
    call_command("dq_sync_topics", "--check")  # in sync now: no error
    assert AuditEntry.objects.filter(action="topic.sync").exists()


def test_unmanaged_topics_are_listed_and_can_be_adopted(site_queue, admin_user, capsys):
    site_queue.configure_topic("legacy", visibility_timeout=5)
    site_queue.publish("legacy", "x")
    call_command("dq_sync_topics")
    assert "unmanaged in Redis (adopt them on the dashboard): legacy" in capsys.readouterr().out
    page = admin_user.get(reverse("delayq:overview")).content.decode()
    assert "unmanaged" in page and reverse("delayq:topic_adopt", args=["legacy"]) in page
    response = admin_user.post(reverse("delayq:topic_adopt", args=["legacy"]))
    assert response.status_code == 302
    topic = Topic.objects.get(name="legacy")
    assert topic.engine_config() == site_queue.topic_config("legacy")
    assert AuditEntry.objects.filter(action="topic.adopt", topic="legacy", username="boss").exists()


def test_pause_stops_claims_but_not_publishing(site_queue, admin_user, policy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        make_topic(policy)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "1"})
    assert response.status_code == 302
    site_queue.publish("orders", "x")
    result = site_queue.claim_batch("orders", 1)
    assert result.paused and result.deliveries == []
    assert site_queue.counts("orders")[MessageState.ready] == 1
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "0"})
    assert len(site_queue.claim("orders")) == 1
    assert list(AuditEntry.objects.filter(topic="orders").values_list("action", flat=True)) == \
        ["topic.resume", "topic.pause"]


def test_topic_page_shows_the_retry_preview(site_queue, viewer, policy, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        make_topic(policy)
    html = viewer.get(reverse("delayq:topic", args=["orders"])).content.decode()
    assert policy.preview in html and "2 s, 2 s, then dead after 3 attempts" in html
    assert "Pause topic" not in html  # viewers see no actions
    assert viewer.get(reverse("delayq:topic", args=["nope"])).status_code == 404
