"""Cancel on an unacked message (action ``cancel_running``: DelayQueue.cancel(..., running=True)):
permission as cancel, CSRF, a confirmation, audited, compare-and-set on the state the operator saw."""

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry
from queue_core import LeaseLost, MessageState

pytestmark = pytest.mark.django_db


def cancel_running(client, ids, state="unacked", htmx=False):
    url = reverse("delayq:message_action", args=["orders", state])
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(url, {"action": "cancel_running", "ids": ids}, headers=headers)


def claimed(q, n=1):
    q.configure_topic("orders", visibility_timeout=60)
    q.publish_many("orders", [f"m{i}" for i in range(n)])
    return q.claim("orders", n)


@pytest.mark.parametrize("persona, status", [("nobody", 403), ("viewer", 403), ("operator", 302),
                                             ("admin_user", 302)])
def test_permission_is_the_cancel_permission(request, site_queue, persona, status):
    """Only users who may cancel messages may cancel running ones; refused, nothing changes."""
    [d] = claimed(site_queue)
    assert cancel_running(request.getfixturevalue(persona), [d.id]).status_code == status
    want = MessageState.dead if status == 302 else MessageState.unacked
    assert site_queue.get("orders", d.id).state is want


def test_cancel_running_is_audited_and_fences_the_worker(operator, site_queue):
    """The message is dead "cancelled by user:operator", the audit row names the user and the id,
    and the lease holder's ack is refused."""
    [d] = claimed(site_queue)
    response = cancel_running(operator, [d.id])
    assert response.status_code == 302 and response["Location"].endswith("/topics/orders/default/unacked/")
    m = site_queue.get("orders", d.id)
    assert m.history[-1].event == "cancelled" and m.last_error.message == "cancelled by user:operator"
    [entry] = AuditEntry.objects.filter(action="message.cancel_running")
    assert entry.user == operator.user and entry.message_ids == [d.id] and entry.affected == 1
    assert entry.scope == {"state": "unacked"} and entry.result == "ok"
    with pytest.raises(LeaseLost):
        site_queue.ack(d)


def test_htmx_cancel_returns_the_region_and_reports_a_message_no_longer_running(operator, site_queue):
    """htmx gets the refreshed rows; a message acked meanwhile is reported as skipped."""
    a, b = claimed(site_queue, 2)
    site_queue.ack(b)
    html = cancel_running(operator, [a.id, b.id], htmx=True).content.decode()
    assert html.lstrip().startswith('<section id="messages"')
    assert "Cancelled 1 message of group default; 1 skipped because it was no longer unacked." in html
    assert site_queue.get("orders", a.id).state is MessageState.dead
    [entry] = AuditEntry.objects.filter(action="message.cancel_running")
    assert entry.result == "partial" and entry.affected == 1 and entry.requested == 2


def test_csrf_is_enforced(operator, site_queue):
    [d] = claimed(site_queue)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    assert cancel_running(strict, [d.id]).status_code == 403
    assert site_queue.get("orders", d.id).state is MessageState.unacked


def test_only_unacked_messages_take_it(operator, site_queue):
    """On another state's tab the action does not apply (400); the plain cancel keeps its states."""
    [mid] = site_queue.publish_many("orders", ["a"])
    assert cancel_running(operator, [mid], state="ready").status_code == 400
    assert site_queue.get("orders", mid).state is MessageState.ready


def test_the_message_page_offers_cancel_with_a_confirmation(operator, viewer, site_queue):
    """An unacked message's page has a Cancel button that asks first; a viewer gets none."""
    [d] = claimed(site_queue)
    url = reverse("delayq:message", args=["orders", d.id])
    page = operator.get(url).content.decode()
    assert 'value="cancel_running">Cancel</button>' in page
    assert "Cancel the selected running messages?" in page and 'name="csrfmiddlewaretoken"' in page
    assert 'value="cancel_running"' not in viewer.get(url).content.decode()
