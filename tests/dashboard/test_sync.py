"""Saving topics and policies configures the engine; drift is detected and repaired."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from dashboard import services
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


# -- configuration never lost by a save ----------------------------------------------------------

from dashboard.models import ConsumerGroup  # noqa: E402
from dashboard.services import config_map  # noqa: E402

# A value other than the default for every engine setting the Django rows do not own.
TOPIC_ENGINE_ONLY = {"events_maxlen": 777, "max_delay": 3600.0, "history_max": 7}
DEFAULT_GROUP_ENGINE_ONLY = {"ordered": True, "hold_key_on_dead": True, "ttl": 90.0, "on_expire": "drop"}
GROUP_ENGINE_ONLY = {"hold_key_on_dead": True}
ADMIN_TOPIC_FORM = {"visibility_timeout": "45", "max_payload_bytes": "1048576", "dead_max_count": "100000",
                    "dead_max_age": "1209600", "events": "on", "redaction_rules": "[]", "description": "",
                    "owner": "", "partitions": "1"}


def test_the_tests_cover_every_engine_only_field():
    """A new engine setting must be added here (and so be tested) before it can be forgotten."""
    # The dispatch limits are owned by the rows (test_limits.py round-trips them).
    assert set(TOPIC_ENGINE_ONLY) == set(config_map.TOPIC_ENGINE_ONLY)
    assert set(DEFAULT_GROUP_ENGINE_ONLY) == set(config_map.DEFAULT_GROUP_ENGINE_ONLY)
    assert set(GROUP_ENGINE_ONLY) == set(config_map.GROUP_ENGINE_ONLY)


def _admin_save(client, topic, groups=(), **changes):
    """POST the topic's admin change form as a person would, with its group rows."""
    data = {"name": topic.name, "retry_policy": str(topic.retry_policy_id), **ADMIN_TOPIC_FORM,
            "groups-TOTAL_FORMS": str(len(groups)), "groups-INITIAL_FORMS": str(len(groups))}
    for i, g in enumerate(groups):
        data.update({f"groups-{i}-id": str(g.pk), f"groups-{i}-topic": str(topic.pk), f"groups-{i}-name": g.name,
                     f"groups-{i}-retry_policy": str(g.retry_policy_id), f"groups-{i}-visibility_timeout": "61",
                     f"groups-{i}-dead_max_count": "500", f"groups-{i}-dead_max_age": "3600",
                     f"groups-{i}-ttl": "0", f"groups-{i}-on_expire": "dead"})
    data.update(changes)
    response = client.post(reverse("admin:delayq_topic_change", args=[topic.pk]), data)
    assert response.status_code == 302, response.content[:3000]


@pytest.mark.parametrize("field, value", TOPIC_ENGINE_ONLY.items())
def test_finding_admin_save_resets_topic_settings_set_from_python(site_queue, admin_user, policy, field, value,
                                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy)
    site_queue.configure_topic("orders", site_queue.topic_config("orders").replace(**{field: value}))
    with django_capture_on_commit_callbacks(execute=True):
        _admin_save(admin_user, topic)
    cfg = site_queue.topic_config("orders")
    assert cfg.visibility_timeout == 45                 # the admin's own change arrived...
    assert getattr(cfg, field) == value                 # ...and the Python-side setting survived it
    call_command("dq_sync_topics", "--check")           # not reported as drift either


@pytest.mark.parametrize("field, value", DEFAULT_GROUP_ENGINE_ONLY.items())
def test_finding_admin_save_resets_default_group_settings_set_from_python(
        site_queue, admin_user, policy, field, value, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy)
    site_queue.configure_group("orders", "default", site_queue.group_config("orders").replace(**{field: value}))
    with django_capture_on_commit_callbacks(execute=True):
        _admin_save(admin_user, topic)
    assert getattr(site_queue.group_config("orders"), field) == value
    assert site_queue.group_config("orders").visibility_timeout == 45


@pytest.mark.parametrize("field, value", GROUP_ENGINE_ONLY.items())
def test_finding_admin_save_resets_group_settings_set_from_python(site_queue, admin_user, policy, field, value,
                                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        topic = make_topic(policy)
        group = ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=policy)
    site_queue.configure_group("orders", "billing",
                               site_queue.group_config("orders", "billing").replace(**{field: value}))
    with django_capture_on_commit_callbacks(execute=True):
        _admin_save(admin_user, topic, [group])
    cfg = site_queue.group_config("orders", "billing")
    assert getattr(cfg, field) == value and cfg.visibility_timeout == 61


def test_finding_pause_and_adopt_reset_settings_set_from_python(site_queue, admin_user, policy,
                                                                 django_capture_on_commit_callbacks):
    site_queue.configure_topic("orders", partitions=3, **TOPIC_ENGINE_ONLY)
    site_queue.configure_group("orders", "default", site_queue.group_config("orders").replace(
        **DEFAULT_GROUP_ENGINE_ONLY))
    site_queue.configure_group("orders", "billing", hold_key_on_dead=True, ordered=True)
    site_queue.publish("orders", "x")
    before = (site_queue.topic_config("orders"), site_queue.group_config("orders"),
              site_queue.group_config("orders", "billing"))
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_user.post(reverse("delayq:topic_adopt", args=["orders"])).status_code == 302
    topic = Topic.objects.get(name="orders")
    assert topic.sync_error == "" and topic.partitions == 3
    assert (site_queue.topic_config("orders"), site_queue.group_config("orders"),
            site_queue.group_config("orders", "billing")) == before
    for group in ("default", "billing"):
        with django_capture_on_commit_callbacks(execute=True):
            admin_user.post(reverse("delayq:topic_pause", args=["orders", group]), {"paused": "1"})
    cfg, default, billing = (site_queue.topic_config("orders"), site_queue.group_config("orders"),
                             site_queue.group_config("orders", "billing"))
    assert cfg.paused and billing.paused
    assert cfg == before[0].replace(paused=True)
    assert default == before[1].replace(paused=True) and billing == before[2].replace(paused=True)


def test_finding_adopt_changes_the_partition_count(site_queue, admin_user, django_capture_on_commit_callbacks):
    site_queue.configure_topic("empty", partitions=4)      # empty: a sync could have shrunk it unnoticed
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_adopt", args=["empty"]))
    assert Topic.objects.get(name="empty").partitions == 4
    assert site_queue.layout("empty", fresh=True).partitions == 4


# Every field a Django row owns, with a value other than its default: Django -> engine -> adopt -> Django.
TOPIC_OWNED = {"visibility_timeout": 12.5, "max_payload_bytes": 2048, "dead_max_count": 9, "dead_max_age": 60.0,
               "events": False, "paused": True, "partitions": 3}
GROUP_OWNED = {"visibility_timeout": 7.5, "dead_max_count": 3, "dead_max_age": 0.0, "ordered": True, "ttl": 30.0,
               "on_expire": "drop", "paused": True}
POLICY_OWNED = [dict(kind="fixed", base_delay=4.0, factor=2.0, max_delay=0.0, schedule=[], jitter=0.0, max_attempts=2),
                dict(kind="linear", base_delay=1.5, factor=2.0, max_delay=20.0, schedule=[], jitter=0.3,
                     max_attempts=6),
                dict(kind="exponential", base_delay=0.5, factor=3.0, max_delay=100.0, schedule=[], jitter=0.2,
                     max_attempts=9),
                dict(kind="custom", base_delay=1.0, factor=2.0, max_delay=0.0, schedule=[1.0, 10.0, 60.0],
                     jitter=0.0, max_attempts=4)]


def test_round_trip_tests_cover_every_owned_field():
    assert set(TOPIC_OWNED) == set(config_map.TOPIC_FIELDS)
    assert set(GROUP_OWNED) == set(config_map.GROUP_FIELDS)
    assert {k for p in POLICY_OWNED for k in p} == set(config_map.POLICY_FIELDS)


def _round_trip(django_capture_on_commit_callbacks, topic_fields=None, group_fields=None, policy_fields=None):
    policy = RetryPolicy.objects.create(name="original", **(policy_fields or {}))
    with django_capture_on_commit_callbacks(execute=True):
        topic = Topic.objects.create(name="orders", retry_policy=policy, **(topic_fields or {}))
        ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=policy, **(group_fields or {}))
    topic.refresh_from_db()
    assert topic.sync_error == ""
    Topic.objects.all().delete()          # the rows go; the engine keeps the configuration
    RetryPolicy.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        adopted = services.adopt("orders")
    return adopted, adopted.groups.get(name="billing")


@pytest.mark.parametrize("field, value", TOPIC_OWNED.items())
def test_topic_field_round_trips_through_the_engine_and_adopt(site_queue, field, value,
                                                             django_capture_on_commit_callbacks):
    topic, _ = _round_trip(django_capture_on_commit_callbacks, topic_fields={field: value})
    assert getattr(topic, field) == value


@pytest.mark.parametrize("field, value", GROUP_OWNED.items())
def test_group_field_round_trips_through_the_engine_and_adopt(site_queue, field, value,
                                                             django_capture_on_commit_callbacks):
    _, group = _round_trip(django_capture_on_commit_callbacks, group_fields={field: value})
    assert getattr(group, field) == value


@pytest.mark.parametrize("fields_", POLICY_OWNED, ids=lambda p: p["kind"])
def test_retry_policy_round_trips_through_the_engine_and_adopt(site_queue, fields_,
                                                              django_capture_on_commit_callbacks):
    topic, group = _round_trip(django_capture_on_commit_callbacks, policy_fields=fields_)
    for policy in (topic.retry_policy, group.retry_policy):
        assert {k: getattr(policy, k) for k in fields_} == fields_


# -- pausing what does not exist ---------------------------------------------------------------

def test_finding_pausing_an_unknown_topic_creates_a_phantom(site_queue, admin_user):
    for paused in (True, False):
        with pytest.raises(services.UnknownTopic, match="no topic 'ghost' in Redis or the database"):
            services.set_paused("ghost", paused)
    response = admin_user.post(reverse("delayq:topic_pause", args=["ghost"]), {"paused": "1"})
    assert response.status_code == 404
    assert "There is no topic &#x27;ghost&#x27; in Redis or the database" in response.content.decode()
    assert admin_user.post(reverse("delayq:topic_adopt", args=["ghost"])).status_code == 404
    assert "ghost" not in site_queue.topics() and not site_queue.is_configured("ghost")
    assert not site_queue.redis.keys("*ghost*")
    assert not Topic.objects.exists() and not AuditEntry.objects.filter(topic="ghost").exists()


def test_finding_pausing_an_unknown_group_creates_a_phantom(site_queue):
    site_queue.publish("orders", "x")
    with pytest.raises(services.UnknownTopic, match="has no consumer group 'ghost'; its groups are default"):
        services.set_paused("orders", True, "ghost")
    assert site_queue.groups("orders") == ["default"] and not site_queue.redis.keys("*ghost*")
