"""Dispatch limits set in the Django admin (issue 33): written to the engine after commit, applied by
the next claim, audited, refused with the engine's words when they cannot work."""

import pytest
from django.core.management import call_command
from django.urls import reverse

from dashboard import services
from dashboard.models import AuditEntry, ConsumerGroup, RetryPolicy, Topic
from dashboard.services import config_map

pytestmark = pytest.mark.django_db

TOPIC_FORM = {"visibility_timeout": "30", "max_payload_bytes": "1048576", "dead_max_count": "100000",
              "dead_max_age": "1209600", "events": "on", "redaction_rules": "[]", "description": "", "owner": "",
              "partitions": "1", "fairness_weights": "{}"}
GROUP_ROW = {"visibility_timeout": "30", "dead_max_count": "500", "dead_max_age": "3600", "ttl": "0",
             "on_expire": "dead", "fairness_weights": "{}"}
# Every limit field with a value other than its default.
LIMITS_OWNED = {"rate_count": 100, "rate_period": 0.5, "max_in_flight": 50, "key_rate_count": 5,
                "key_rate_period": 2.0, "max_in_flight_per_key": 2, "fairness_weights": {"acme": 3, "*": 1}}


@pytest.fixture
def topic(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p", kind="exponential", jitter=0)
    with django_capture_on_commit_callbacks(execute=True):
        return Topic.objects.create(name="emails", retry_policy=policy)


def save(client, topic, groups=(), **changes):
    """POST the topic's admin change form as the page would, with its group rows ("groups-0-...")."""
    data = {"name": topic.name, "retry_policy": str(topic.retry_policy_id), **TOPIC_FORM,
            "groups-TOTAL_FORMS": str(len(groups)), "groups-INITIAL_FORMS": str(len(groups))}
    for i, g in enumerate(groups):
        data.update({f"groups-{i}-id": str(g.pk), f"groups-{i}-topic": str(topic.pk), f"groups-{i}-name": g.name,
                     f"groups-{i}-retry_policy": str(g.retry_policy_id),
                     **{f"groups-{i}-{k}": v for k, v in GROUP_ROW.items()}})
    data.update(changes)
    return client.post(reverse("admin:delayq_topic_change", args=[topic.pk]), data)


def test_the_round_trip_covers_every_limit_field():
    assert set(LIMITS_OWNED) == set(config_map.LIMIT_FIELDS)


def test_limits_set_in_the_admin_reach_the_engine_audited_and_keep_python_settings(
        admin_user, topic, site_queue, django_capture_on_commit_callbacks):
    site_queue.configure_group("emails", "default", site_queue.group_config("emails").replace(ordered=True))
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, topic, rate_count="100", rate_period="1", max_in_flight="50",
                        key_rate_count="5", max_in_flight_per_key="2", fairness_weights='{"acme": 3, "*": 1}')
    assert response.status_code == 302, response.content[:3000]
    cfg = site_queue.group_config("emails")
    assert (cfg.rate, cfg.max_in_flight, cfg.key_rate, cfg.max_in_flight_per_key) == ((100, 1.0), 50, (5, 1.0), 2)
    assert cfg.fairness == {"acme": 3, "*": 1}
    assert cfg.ordered                                # set from Python, not the row's: kept
    entry = AuditEntry.objects.get(action="topic.change")
    assert entry.username == "boss" and entry.topic == "emails"
    assert entry.scope["changed"]["rate_count"] == "None -> 100"
    assert entry.scope["changed"]["max_in_flight"] == "None -> 50"
    assert "Limits now: at most 100 per 1 s; at most 50 in flight; per fairness key 5 per 1 s and 2 in flight" \
        in entry.detail
    call_command("dq_sync_topics", "--check")         # in sync: no drift reported


def test_a_limit_changed_in_the_admin_applies_to_the_next_claim(admin_user, topic, site_queue,
                                                                django_capture_on_commit_callbacks):
    site_queue.publish_many("emails", [f"m{i}" for i in range(10)])
    with django_capture_on_commit_callbacks(execute=True):
        save(admin_user, topic, max_in_flight="3")
    first = site_queue.claim("emails", 10)
    assert len(first) == 3                            # the limit, read by the claim script itself
    state = site_queue.dispatch_state("emails")
    assert state.held_back == 7 and state.reasons == {"max_in_flight": 7}
    with django_capture_on_commit_callbacks(execute=True):
        save(admin_user, topic, max_in_flight="")     # blank: no limit
    assert site_queue.group_config("emails").max_in_flight is None
    assert len(site_queue.claim("emails", 10)) == 7


def test_a_groups_limits_are_set_on_its_inline_row(admin_user, topic, site_queue,
                                                   django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        group = ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=topic.retry_policy)
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, topic, [group], **{"groups-0-key_rate_count": "7",
                                                       "groups-0-key_rate_period": "60"})
    assert response.status_code == 302, response.content[:3000]
    assert site_queue.group_config("emails", "billing").key_rate == (7, 60.0)
    assert site_queue.group_config("emails").key_rate is None       # the default group's are the topic's
    entry = AuditEntry.objects.get(action="group.change")
    assert entry.group == "billing" and entry.scope["changed"]["key_rate_count"] == "None -> 7"
    assert "per fairness key 7 per 60 s" in entry.detail


@pytest.mark.parametrize("field, value, words", [
    ("rate_count", "0", "rate: the count must be at least 1"),
    ("rate_period", "0", "rate: the period must be between 0.001 s and one day"),
    ("key_rate_count", "-3", "key_rate: the count must be at least 1"),
    ("max_in_flight", "0", "max_in_flight must be a whole number of at least 1"),
    ("max_in_flight_per_key", "0", "max_in_flight_per_key must be a whole number of at least 1"),
    ("fairness_weights", "[1, 2]", "fairness must be &#x27;round_robin&#x27; or a dict of weights"),
    ("fairness_weights", '{"acme": -1}', "fairness weight of &#x27;acme&#x27; must be a number in (0, 1000]"),
    ("fairness_weights", '{"' + "k" * 300 + '": 1}', "at most 256 bytes"),
    ("fairness_weights", '{"acme": "3"}', "fairness weight of &#x27;acme&#x27; must be a number in (0, 1000]"),
    ("fairness_weights", "{acme: 3}", "Enter a valid JSON"),
    ("rate_count", "99999999999999999999999", "Ensure this value is less than or equal to"),
    ("rate_period", "inf", "Enter a number"),
    ("max_in_flight", "many", "Enter a whole number"),
])
def test_a_limit_that_cannot_work_is_a_form_error_in_the_engines_words(
        admin_user, topic, site_queue, field, value, words, django_capture_on_commit_callbacks):
    changes = {field: value}
    if field == "rate_period":
        changes["rate_count"] = "10"
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, topic, **changes)
    assert response.status_code == 200                # the form again, with the error on its field
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert words in response.content.decode()
    assert site_queue.group_config("emails") == site_queue.group_config("emails").replace(
        rate=None, max_in_flight=None, key_rate=None, max_in_flight_per_key=None, fairness="round_robin")
    assert not AuditEntry.objects.filter(action="topic.change").exists()


def test_max_in_flight_below_the_partition_count_is_a_form_error(admin_user, topic, site_queue,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, topic, partitions="4", max_in_flight="3")
    assert response.status_code == 200
    assert "max_in_flight=3 is below the topic&#x27;s 4 partitions" in response.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        assert save(admin_user, topic, partitions="4", max_in_flight="4").status_code == 302
    assert site_queue.group_config("emails").max_in_flight == 4
    assert Topic.objects.get().sync_error == ""


def test_limits_round_trip_through_the_engine_and_adopt(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="original")
    with django_capture_on_commit_callbacks(execute=True):
        topic = Topic.objects.create(name="emails", retry_policy=policy, **LIMITS_OWNED)
        ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=policy, **LIMITS_OWNED)
    assert Topic.objects.get().sync_error == ""
    Topic.objects.all().delete()
    RetryPolicy.objects.all().delete()
    with django_capture_on_commit_callbacks(execute=True):
        adopted = services.adopt("emails")
    for row in (adopted, adopted.groups.get(name="billing")):
        assert {k: getattr(row, k) for k in LIMITS_OWNED} == LIMITS_OWNED


def test_limits_set_from_python_show_as_drift_until_synced(admin_user, topic, site_queue,
                                                           django_capture_on_commit_callbacks):
    site_queue.configure_group("emails", "default", site_queue.group_config("emails").replace(rate=(9, 1.0)))
    report = services.drift(topic)
    assert report.differences == {"group default: rate": ((9, 1.0), None)}
    services.sync_topic(topic)                        # the row owns the limits: its blank wins
    assert site_queue.group_config("emails").rate is None and services.drift(topic).in_sync


def test_limits_on_a_celery_bridge_topic_are_read_only(admin_user, site_queue, django_capture_on_commit_callbacks):
    site_queue.configure_topic("celery.tasks")
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:topic_adopt", args=["celery.tasks"]))
    topic = Topic.objects.get(name="celery.tasks")
    page = admin_user.get(reverse("admin:delayq_topic_change", args=[topic.pk]))
    assert "rate_count" not in page.context["adminform"].form.fields          # shown read-only
    topic.rate_count = 5
    with pytest.raises(Exception, match="belongs to the Celery bridge"):
        topic.full_clean()


# -- what the pages say ----------------------------------------------------------------------------

KEY = "<b>acme</b>"     # a fairness key is producer text: escaped wherever it is shown


def held_back_by_key(q):
    """Three messages of KEY (the first of priority 7), two of "zed", one without a key, each key
    allowed one in flight; one claim takes one of each, so three stay ready, held back."""
    q.configure_topic("emails")
    q.configure_group("emails", "default", max_in_flight_per_key=1, key_rate=(1, 3600))
    ids = [q.publish("emails", f"a{i}", fairness_key=KEY, priority=7 if i == 0 else 0) for i in range(3)]
    ids += [q.publish("emails", f"z{i}", fairness_key="zed") for i in range(2)]
    ids.append(q.publish("emails", "plain"))
    claimed = q.claim("emails", 10)
    assert len(claimed) == 3
    return ids, claimed


def test_the_topic_page_says_the_limits_what_they_hold_back_and_the_largest_keys(viewer, site_queue):
    held_back_by_key(site_queue)
    response = viewer.get(reverse("delayq:topic_state", args=["emails", "default", "ready"]))
    assert response.status_code == 200
    html = response.content.decode()
    assert "per fairness key 1 per 3600 s and 1 in flight" in html
    assert "3 of 3 ready messages held back by a fairness key&#x27;s in-flight limit (3)" in html
    assert "Claims cut short since the group began: 3 by a fairness key&#x27;s in-flight limit" in html
    assert "<code>&lt;b&gt;acme&lt;/b&gt;</code></td><td>2</td>" in html and "<b>acme</b>" not in html
    assert "<code>zed</code></td><td>1</td>" in html
    assert 'data-testid="rate-now">0.0 acked/s' in html
    counts = viewer.get(reverse("delayq:topic_state", args=["emails", "default", "ready"]) + "?region=counts",
                        headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="held-back"' in counts      # the live refresh redraws it


def test_the_topic_page_of_a_group_without_limits_says_so(viewer, site_queue):
    site_queue.publish("plain", "x")
    html = viewer.get(reverse("delayq:topic", args=["plain"])).content.decode()
    assert "no limits (keys, when messages have them, take turns)" in html
    assert 'data-testid="held-back"' not in html and 'data-testid="fairness-keys"' not in html


def test_each_groups_page_says_its_own_limits(viewer, site_queue):
    site_queue.configure_topic("emails")
    site_queue.configure_group("emails", "bulk", max_in_flight=7, fairness={"acme": 3, "*": 1})
    html = viewer.get(reverse("delayq:topic_state", args=["emails", "bulk", "ready"])).content.decode()
    assert "at most 7 in flight; fairness weights * x1, acme x3" in html
    default = viewer.get(reverse("delayq:topic_state", args=["emails", "default", "ready"])).content.decode()
    assert "at most 7 in flight" not in default


def test_a_held_back_message_says_why_with_its_priority_and_fairness_key(viewer, site_queue):
    ids, _ = held_back_by_key(site_queue)
    html = viewer.get(reverse("delayq:message", args=["emails", "default", ids[1]])).content.decode()
    assert ("waiting: key &lt;b&gt;acme&lt;/b&gt; has 1 in flight (its limit is 1)" in html
            and "<b>acme</b>" not in html)
    assert 'data-testid="priority">0 ' in html
    assert 'data-testid="fairness-key"><code>&lt;b&gt;acme&lt;/b&gt;</code>' in html
    claimed = viewer.get(reverse("delayq:message", args=["emails", "default", ids[0]])).content.decode()
    assert 'data-testid="priority">7 ' in claimed and 'data-testid="held-reason"' not in claimed
    plain = viewer.get(reverse("delayq:message", args=["emails", "default", ids[-1]])).content.decode()
    assert 'data-testid="fairness-key"' not in plain and 'data-testid="held-reason"' not in plain


# -- publishing with a fairness key and a priority ----------------------------------------------------

from django.test import Client  # noqa: E402

from .test_api_tokens import _token_for  # noqa: E402


@pytest.fixture
def api_post(operator, site_queue):
    site_queue.configure_topic("emails")
    auth = {"Authorization": f"Bearer {_token_for(operator)}"}
    url = reverse("delayq:api_publish", args=["emails"])

    def post(body):
        return Client().post(url, body, content_type="application/json", headers=auth)
    post.auth = auth["Authorization"]
    return post


def test_the_api_publishes_with_a_fairness_key_and_a_priority(api_post, site_queue):
    done = api_post('{"payload": {"to": "a@example.com"}, "fairness_key": "acme", "priority": 7}')
    assert done.status_code == 201, done.content
    message = site_queue.get("emails", done.json()["id"])
    assert (message.fairness_key, message.priority) == ("acme", 7)
    batch = api_post('{"messages": [{"payload": 1, "fairness_key": "zed"}, {"payload": 2, "priority": 10}]}')
    assert batch.status_code == 207
    first, second = batch.json()["results"]
    assert site_queue.get("emails", first["id"]).fairness_key == "zed"
    assert second["error"] == "priority must be an integer from 0 to 9, not 10"
    listed = Client().get(reverse("delayq:api_messages", args=["emails", "ready"]),
                          headers={"Authorization": api_post.auth}).json()["messages"]
    assert sorted((m["fairness_key"], m["priority"]) for m in listed) == [("acme", 7), ("zed", 0)]


@pytest.mark.parametrize("fields, says", [
    ('"priority": -1', "priority must be an integer from 0 to 9, not -1"),
    ('"priority": 2.5', "priority must be an integer from 0 to 9, not 2.5"),
    ('"priority": "high"', "priority must be an integer from 0 to 9, not 'high'"),
    ('"priority": true', "priority must be an integer from 0 to 9, not True"),
    ('"fairness_key": ""', "fairness_key must be a non-empty string"),
    ('"fairness_key": 42', "fairness_key must be a string, not int"),
    ('"fairness_key": "' + "é" * 129 + '"', "fairness_key must be at most 256 bytes without NUL characters "
                                            "(got 258 bytes)"),
    ('"fairness_key": "a\\u0000b"', "without NUL characters"),
])
def test_the_api_refuses_a_bad_fairness_key_or_priority_with_a_400_that_says_why(api_post, site_queue, fields, says):
    answer = api_post('{"payload": 1, ' + fields + "}")
    assert answer.status_code == 400 and says in answer.json()["error"], answer.content
    assert site_queue.counts("emails")["ready"] == 0


def test_the_publish_form_takes_a_fairness_key_and_a_priority(operator, site_queue):
    site_queue.configure_topic("emails")
    page = operator.get(reverse("delayq:topic", args=["emails"])).content.decode()
    assert 'name="fairness_key"' in page and 'name="priority"' in page
    url = reverse("delayq:publish", args=["emails"])
    done = operator.post(url, {"kind": "text", "payload": "hi", "fairness_key": "acme", "priority": "9"})
    assert done.status_code == 302
    message = site_queue.get("emails", AuditEntry.objects.get(action="message.publish").message_ids[0])
    assert (message.fairness_key, message.priority) == ("acme", 9)
    for priority, says in (("12", "not 12"), ("x", "not &#x27;x&#x27;"), ("1e999", "not &#x27;1e999&#x27;")):
        refused = operator.post(url, {"kind": "text", "payload": "hi", "priority": priority})
        assert refused.status_code == 400 and says in refused.content.decode()
    long_key = operator.post(url, {"kind": "text", "payload": "hi", "fairness_key": "k" * 300})
    assert long_key.status_code == 400 and "at most 256 bytes" in long_key.content.decode()
    assert site_queue.counts("emails")["ready"] == 1


def test_a_groups_max_in_flight_is_checked_against_the_partition_count_saved_with_it(
        admin_user, topic, site_queue, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        group = ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=topic.retry_policy)
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, topic, [group], partitions="4", **{"groups-0-max_in_flight": "2"})
    assert response.status_code == 200
    assert "max_in_flight=2 is below the topic&#x27;s 4 partitions" in response.content.decode()
    assert site_queue.layout("emails", fresh=True).partitions == 1      # nothing was written


def test_the_admin_shows_the_limits_in_fieldsets_of_their_own(admin_user, topic, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=topic.retry_policy)
    html = admin_user.get(reverse("admin:delayq_topic_change", args=[topic.pk])).content.decode()
    assert "Dispatch limits of the default group" in html and 'name="rate_count"' in html
    assert 'name="groups-0-max_in_flight_per_key"' in html and 'name="groups-0-fairness_weights"' in html


def test_publish_form_odd_priority_text_is_400(operator, site_queue):
    """Security review: '--5' passed the form's digit check and int() raised: a 500."""
    site_queue.configure_topic("emails")
    url = reverse("delayq:publish", args=["emails"])
    for priority in ("--5", "-", "+5", "٣", "5e0"):
        refused = operator.post(url, {"kind": "text", "payload": "hi", "priority": priority})
        assert refused.status_code == 400, priority
    assert site_queue.counts("emails")["ready"] == 0
