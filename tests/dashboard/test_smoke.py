"""No page can 500 on data delayq itself wrote: every topic in the registry (a managed one with two
groups and two partitions, the Celery bridge's with its 20,000-attempt policy, an adopted one, one
Django does not know), every state tab of every group (page and htmx region), the message page of a
message in each state, the JSON API's lists, and the admin's list, add and change pages of every
model, as a superuser. Also: engine-written history details are never masked as card numbers."""

from datetime import UTC, datetime, timedelta

import pytest
from celery import Celery
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from dashboard import services
from dashboard.redaction import MASK, looks_like_card
from queue_core import MessageState, RetryPolicy
from queue_core.contrib.celery_bridge import DelayqScheduling

pytestmark = pytest.mark.django_db
STATES = [s.value for s in MessageState]


def _every_state(q, topic, group="default"):
    """Messages of ``group`` in each state: pending, ready, unacked, retrying, dead (one corrupt)."""
    q.publish(topic, {"n": "pending"}, delay=600)
    ids = q.publish_many(topic, [{"n": i} for i in range(4)])
    claimed = q.claim(topic, 3, group=group)
    q.nack(claimed[0], ValueError("try again"))          # retrying
    q.reject(claimed[1], ValueError("card 4111 1111 1111 1111 refused"))   # dead
    return ids


@pytest.fixture
def superuser(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def every_kind_of_topic(site_queue):
    """The registry as a fresh site has it after some use."""
    q = site_queue
    q.configure_topic("smoke-orders", partitions=2, retry=RetryPolicy.fixed(60, max_attempts=3))
    q.configure_group("smoke-orders", "billing", retry=RetryPolicy.exponential(base=1, factor=2, max_delay=60,
                                                                           max_attempts=5000))
    _every_state(q, "smoke-orders")
    _every_state(q, "smoke-orders", "billing")
    q.publish("adopted", "plain text payload")
    services.adopt("adopted")
    q.publish("stray", b"\xff\xfe not utf-8", delay=30)              # in Redis only: unmanaged
    app = Celery("smoke", broker="memory://", set_as_current=False)
    bridge = DelayqScheduling(app, queue=q, min_delay=1.0, signing_key="smoke-test-signing-key")

    @app.task(name="smoke.task")
    def task(n):
        return n

    bridge.forwarder(queues=["celery"], concurrency=1)               # creates celery.celery with its policy
    task.apply_async(args=[1], countdown=600)
    task.apply_async(args=[2], countdown=600)
    [due] = [m for m in q.peek("celery.celery", "pending")][:1]
    q.deliver_now("celery.celery", due.id)
    [forwarding] = q.claim("celery.celery")
    q.nack(forwarding, ConnectionError("broker down"))
    return q


def _ok(client, url, **extra):
    response = client.get(url, **extra)
    assert response.status_code < 500, f"{url}: {response.status_code}"
    return response


def test_finding_no_page_500s_on_data_delayq_wrote(superuser, every_kind_of_topic):
    q = every_kind_of_topic
    topics = q.topics()
    assert {"smoke-orders", "adopted", "stray", "celery.celery"} <= set(topics)
    _ok(superuser, reverse("delayq:overview"))
    _ok(superuser, reverse("delayq:api_topics"))
    seen_states = set()
    for topic in topics:
        assert _ok(superuser, reverse("delayq:topic", args=[topic])).status_code in (200, 302)
        _ok(superuser, reverse("delayq:memory", args=[topic]))
        for group in q.groups(topic) or ["default"]:
            for view in ("hour", "day", "week"):
                _ok(superuser, reverse("delayq:forecast", args=[topic, group]) + f"?view={view}")
            _ok(superuser, reverse("delayq:spread", args=[topic, group]))
            for state in STATES:
                url = reverse("delayq:topic_state", args=[topic, group, state])
                assert _ok(superuser, url).status_code == 200
                assert _ok(superuser, url, HTTP_HX_REQUEST="true").status_code == 200
                _ok(superuser, reverse("delayq:api_messages", args=[topic, group, state]))
                for message in q.peek(topic, state, limit=5, group=group):
                    seen_states.add(state)
                    page = _ok(superuser, reverse("delayq:message", args=[topic, group, message.id]))
                    assert page.status_code == 200, (topic, group, state)
                    _ok(superuser, reverse("delayq:api_message", args=[topic, group, message.id]))
    assert seen_states == set(STATES)
    for name in ("operations", "audit", "tokens", "analytics"):
        _ok(superuser, reverse(f"delayq:{name}"))


def test_finding_no_admin_page_500s_on_data_delayq_wrote(superuser, every_kind_of_topic):
    checked = 0
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        base = f"admin:{meta.app_label}_{meta.model_name}"
        assert _ok(superuser, reverse(f"{base}_changelist")).status_code == 200, meta.label
        if model_admin.has_add_permission(_request_for(superuser)):
            _ok(superuser, reverse(f"{base}_add"))
        for obj in model.objects.all()[:5]:
            assert _ok(superuser, reverse(f"{base}_change", args=[obj.pk])).status_code == 200, (meta.label, obj.pk)
            checked += 1
    assert checked >= 4   # topics, groups, retry policies and users at least


def _request_for(client):
    from django.contrib.auth import get_user_model
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="root")
    return request


def test_finding_history_times_masked_as_card_numbers(viewer, site_queue):
    """A rescheduled message's history said 'due 1764012345678 (was ...)' in epoch ms, and one such time
    in ten passes the Luhn check and showed as a masked card number. Times are formatted like every
    other time now, and engine-written details are never redacted."""
    q = site_queue
    msg_id = q.publish("t", {"ok": True}, delay=600)
    start = datetime.now(UTC) + timedelta(hours=1)
    due = next(start + timedelta(milliseconds=i) for i in range(1000)
               if looks_like_card(str(int((start + timedelta(milliseconds=i)).timestamp() * 1000))))
    q.reschedule("t", msg_id, at=due)
    html = viewer.get(reverse("delayq:message", args=["t", "default", msg_id])).content.decode()
    history = html[html.index('<ol class="history">'):]
    history = history[:history.index("</ol>")]
    assert MASK not in history
    assert f"due {due:%Y-%m-%d %H:%M:%S}.{due.microsecond // 1000:03d} UTC" in history
    assert str(int(due.timestamp() * 1000)) not in history
