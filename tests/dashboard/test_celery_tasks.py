"""Celery tasks scheduled through delayq, as the dashboard shows them: the task name, the
arguments decoded from Celery's body and redacted by the usual rules, never the base64 body that
would hide a secret from them."""

import base64
import json

import pytest
from celery import Celery
from django.urls import reverse

from dashboard import celery_tasks
from queue_core import MessageState
from queue_core.celery_bridge import DelayqScheduling

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled(site_queue):
    """One task scheduled by the real bridge (a countdown goes to delayq, not the broker). The
    app must not become Celery's current app: the dashboard's own tasks (shared_task) would then
    be sent to its memory broker by every later test in this process."""
    from celery import _state

    before = _state.get_current_app()
    app = Celery("dash-test", broker="memory://", set_as_current=False)
    DelayqScheduling(app, queue=site_queue, min_delay=1.0)
    assert _state.get_current_app() is before

    @app.task(name="billing.charge")
    def charge(order, card):
        return order

    result = charge.apply_async(args=[42], kwargs={"card": {"number": "4111 1111 1111 1111",
                                                             "password": "hunter2-secret"}}, countdown=600)
    [topic] = [t for t in site_queue.topics() if t.startswith("celery.")]
    [message] = site_queue.page(topic, MessageState.pending).messages
    assert message.key.startswith(result.id)
    return topic, message


def test_the_tab_shows_task_name_and_redacted_arguments(viewer, scheduled):
    topic, message = scheduled
    html = viewer.get(reverse("delayq:topic_state", args=[topic, "pending"])).content.decode()
    assert '<td class="task" data-testid="task">billing.charge</td>' in html
    assert "<th>arguments</th>" in html and "42" in html
    assert "hunter2-secret" not in html and "4111 1111 1111 1111" not in html
    body = json.loads(message.payload)["body"]
    assert body[:40] not in html                                   # the base64 body never shows


def test_operators_deliver_now_and_cancel_scheduled_tasks(operator, scheduled, site_queue):
    topic, message = scheduled
    html = operator.get(reverse("delayq:topic_state", args=[topic, "pending"])).content.decode()
    assert 'value="deliver_now"' in html and 'value="cancel"' in html
    url = reverse("delayq:message_action", args=[topic, "default", "pending"])
    operator.post(url, {"action": "deliver_now", "ids": [message.id]})
    assert site_queue.get(topic, message.id).state is MessageState.ready


def test_every_surface_decodes_and_redacts_the_arguments(viewer, admin_user, scheduled):
    topic, message = scheduled
    page = viewer.get(reverse("delayq:message", args=[topic, "default", message.id])).content.decode()
    assert "billing.charge" in page and "hunter2-secret" not in page and "&quot;order&quot;" not in page
    download = viewer.get(reverse("delayq:message_payload", args=[topic, "default", message.id])).content
    shown = json.loads(download)
    assert shown["task"] == "billing.charge" and shown["args"] == [42]
    assert shown["kwargs"]["card"]["password"] != "hunter2-secret"
    api = viewer.get(reverse("delayq:api_message", args=[topic, message.id])).json()
    assert "hunter2-secret" not in api["payload"] and '"args": [' in api["payload"]
    # The audited reveal shows the record as stored.
    revealed = admin_user.post(reverse("delayq:message_reveal", args=[topic, "default", message.id]))
    assert json.loads(message.payload)["body"][:40] in revealed.content.decode()


def test_records_in_other_serializers_or_damaged_are_not_shown():
    record = {"v": 1, "task": "t", "headers": {"id": "x"}, "content_type": "application/x-python-serialize",
              "content_encoding": "binary", "body": base64.b64encode(b"\x80\x04secret").decode()}
    shown = json.loads(celery_tasks.for_display(json.dumps(record).encode()))
    assert shown["arguments"] == "[8 bytes of application/x-python-serialize: not shown]"
    record.update(content_type="application/json", body="%%%")
    assert "not base64" in json.loads(celery_tasks.for_display(json.dumps(record).encode()))["arguments"]
    assert celery_tasks.for_display(b'{"plain": "payload"}') == b'{"plain": "payload"}'
    assert celery_tasks.for_display(b"\xff not json") == b"\xff not json"


def test_finding_edit_and_replay_of_a_celery_task_is_refused(admin_user, scheduled, site_queue):
    """An admin could edit a dead celery.* letter into any task; the bridge's records are signed, so the
    dashboard refuses the edit (403 saying why, nothing replayed) and hides the button, while replay and
    deliver-now of the record as it is stay."""
    topic, message = scheduled
    site_queue.deliver_now(topic, message.id)
    [claimed] = site_queue.claim(topic)
    site_queue.reject(claimed, "boom")
    assert site_queue.get(topic, message.id).state is MessageState.dead
    page = admin_user.get(reverse("delayq:message", args=[topic, "default", message.id])).content.decode()
    assert "Edit and replay…" not in page and 'value="replay"' in page
    url = reverse("delayq:message_edit", args=[topic, "default", message.id])
    assert admin_user.get(url).status_code == 403
    answer = admin_user.post(url, {"payload": '{"v": 2}', "seen": "x"})
    assert answer.status_code == 403 and "only the Celery bridge writes" in answer.content.decode()
    assert site_queue.get(topic, message.id).state is MessageState.dead
    assert site_queue.get(topic, message.id).payload == message.payload
    admin_user.post(reverse("delayq:message_action", args=[topic, "default", "dead"]),
                    {"action": "replay", "ids": [message.id]})
    assert site_queue.get(topic, message.id).state is MessageState.ready
