"""The topic page's "Publish a message" form: the API's validation, permission and audit, from the
browser, against the session's real Redis."""

import json
import time

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry
from queue_core import MessageState

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def publish(client, topic="orders", htmx=False, **fields):
    return client.post(reverse("delayq:publish", args=[topic]), {"kind": "json", **fields},
                       headers=HTMX if htmx else {})


def test_finding_no_form_to_publish_a_message(operator, viewer, site_queue):
    """The topic page offers the form to publish_message holders only, and it publishes."""
    site_queue.configure_topic("orders")
    page = operator.get(reverse("delayq:topic", args=["orders"])).content.decode()
    assert 'data-testid="publish-panel"' in page and reverse("delayq:publish", args=["orders"]) in page
    assert 'data-testid="publish-panel"' not in viewer.get(reverse("delayq:topic", args=["orders"])).content.decode()
    done = publish(operator, payload='{"order": 42}', delay="30", key="order-42", order_key="customer-7",
                   headers='{"source": "console"}', ttl="3600")
    assert done.status_code == 302 and done["Location"] == reverse("delayq:topic", args=["orders"])
    entry = AuditEntry.objects.get(action="message.publish")
    message = site_queue.get("orders", entry.message_ids[0])
    assert json.loads(message.payload) == {"order": 42} and message.state == MessageState.pending
    assert message.key == "order-42" and message.headers == {"source": "console"}
    assert message.order_key == "customer-7" and message.ttl == 3600
    assert 25_000 < message.due_at.timestamp() * 1000 - time.time() * 1000 <= 30_000
    assert entry.username == "operator" and entry.result == "ok" and entry.scope == {"via": "publish form"}
    landed = operator.get(done["Location"]).content.decode()
    assert f"Published message {message.id}" in landed
    audit_page = operator.get(reverse("delayq:audit")).content.decode()
    assert 'data-testid="via">via publish form</small>' in audit_page


def test_the_form_needs_the_publish_permission(viewer, nobody, site_queue):
    site_queue.configure_topic("orders")
    assert publish(viewer, payload="1").status_code == 403
    assert publish(nobody, payload="1").status_code == 403
    assert site_queue.counts("orders")[MessageState.ready] == 0 and not AuditEntry.objects.exists()


@pytest.mark.parametrize("fields, says", [
    ({"payload": "{order: 42}"}, "the payload is not JSON"),
    ({"payload": ""}, "the payload is empty"),
    ({"payload": "1", "delay": "soon"}, "delay must be a number of seconds"),
    ({"payload": "1", "delay": "-5"}, "delay must be a number of seconds >= 0"),
    ({"payload": "1", "delay": "5", "at": "2030-01-01T00:00"}, "give delay or at, not both"),
    ({"payload": "1", "at": "3999-01-01T00:00"}, "at must be between 1970-01-01"),
    ({"payload": "1", "headers": '["a"]'}, "headers must be an object of strings"),
    ({"payload": "1", "headers": '{"a": 1}'}, "headers must be an object of strings"),
    ({"payload": "1", "ttl": "0"}, "ttl must be a number of seconds >= 0.001"),
    ({"payload": '"\\ud800"'}, "lone UTF-16 surrogate"),
])
def test_bad_input_is_a_400_that_says_what_is_wrong(operator, site_queue, fields, says):
    """The form is read by the API's own checks: the same refusals, shown in the form, values kept."""
    site_queue.configure_topic("orders")
    plain = publish(operator, **fields)
    assert plain.status_code == 400 and says in plain.context["publish"]["error"]
    html = plain.content.decode()
    assert 'data-testid="publish-error"' in html and "Nothing was published" in html
    assert plain.context["publish"]["values"]["payload"] == fields["payload"]     # kept for correcting
    htmx = publish(operator, htmx=True, **fields)
    assert htmx.status_code == 400 and htmx.content.decode().lstrip().startswith('<details class="publish"')
    assert site_queue.counts("orders")[MessageState.pending] + site_queue.counts("orders")[MessageState.ready] == 0


def test_text_payloads_are_published_as_they_were_typed(operator, site_queue):
    site_queue.configure_topic("orders")
    assert publish(operator, payload="not {json}", kind="text").status_code == 302
    entry = AuditEntry.objects.get(action="message.publish")
    assert site_queue.get("orders", entry.message_ids[0]).payload == b"not {json}"


def test_an_engine_refusal_is_shown_and_audited_as_failed(operator, site_queue):
    site_queue.configure_topic("orders", max_payload_bytes=10)
    refused = publish(operator, payload='"' + "x" * 50 + '"')
    assert refused.status_code == 400 and "Nothing was published" in refused.context["publish"]["error"]
    entry = AuditEntry.objects.get(action="message.publish")
    assert entry.result == "failed" and entry.affected == 0 and entry.detail


def test_htmx_gets_the_emptied_panel_a_message_and_a_counter_refresh(operator, site_queue):
    site_queue.configure_topic("orders")
    done = publish(operator, htmx=True, payload='{"n": 1}')
    html = done.content.decode()
    assert done.status_code == 200 and done["HX-Trigger"] == "counts-changed"
    assert html.lstrip().startswith('<details class="publish"') and '{&quot;n&quot;: 1}' not in html
    assert 'id="delayq-messages" hx-swap-oob="true"' in html and "Published message" in html
    assert site_queue.counts("orders")[MessageState.ready] == 1


def test_bridge_topics_are_refused_like_the_api_refuses_them(operator, site_queue):
    site_queue.configure_topic("celery.celery")
    refused = publish(operator, "celery.celery", payload="{}")
    assert refused.status_code == 403 and "only the Celery bridge publishes" in refused.content.decode()
    assert site_queue.counts("celery.celery")[MessageState.ready] == 0
    page = operator.get(reverse("delayq:topic", args=["celery.celery"])).content.decode()
    assert 'data-testid="publish-panel"' not in page


def test_unknown_topic_is_a_404_and_get_shows_the_form(operator, site_queue):
    assert publish(operator, "nope", payload="1").status_code == 404
    site_queue.configure_topic("orders")
    page = operator.get(reverse("delayq:publish", args=["orders"]))
    assert page.status_code == 200 and 'data-testid="publish-panel"' in page.content.decode()


def test_the_form_needs_the_csrf_token(operator, site_queue):
    from django.test import Client

    site_queue.configure_topic("orders")
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator.user)
    assert client.post(reverse("delayq:publish", args=["orders"]), {"payload": "1"}).status_code == 403
    assert site_queue.counts("orders")[MessageState.ready] == 0


def test_the_form_publishes_with_a_dedup_window_and_after_a_message(operator, site_queue):
    """The form's dedup, window, after and group fields reach publish; the answer says what happened."""
    site_queue.configure_topic("orders")
    url = reverse("delayq:publish", args=["orders"])
    page = operator.get(reverse("delayq:topic", args=["orders"])).content.decode()
    assert 'name="dedup"' in page and 'name="window"' in page and 'name="after"' in page
    first = operator.post(url, {"kind": "text", "payload": "one", "key": "k", "dedup": "throttle", "window": "60"},
                          follow=True)
    again = operator.post(url, {"kind": "text", "payload": "two", "key": "k", "dedup": "throttle", "window": "60"},
                          follow=True)
    parent = AuditEntry.objects.filter(action="message.publish").order_by("id")[0].message_ids[0]
    assert f"Published message {parent} to every consumer group" in first.content.decode()
    assert f"Nothing new was published (throttled): the key k is held by message {parent}" in again.content.decode()
    chained = operator.post(url, {"kind": "text", "payload": "next", "after": parent, "delay": "5"}, follow=True)
    assert f"waiting for {parent} to be acked there" in chained.content.decode()
    child = AuditEntry.objects.filter(action="message.publish").order_by("id")[2].message_ids[0]
    assert site_queue.get("orders", child).waiting_for == parent
    for fields, says in (({"dedup": "throttle"}, "needs a key"), ({"group": "default"}, "give after too"),
                         ({"after": "NOPE"}, "nothing would release")):
        refused = operator.post(url, {"kind": "text", "payload": "x", **fields})
        assert refused.status_code == 400 and says in refused.content.decode(), refused.content.decode()[-600:]
    assert site_queue.counts("orders")["ready"] == 1 and site_queue.counts("orders")["pending"] == 1
