"""Operator actions: permission matrix, CSRF, compare-and-set, htmx vs plain, audit."""

import hashlib
import json

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from queue_core import MessageState
from queue_core import RetryPolicy as EnginePolicy

from .helpers import state_counts
from .test_pages import kill

pytestmark = pytest.mark.django_db


def action(client, topic, state, act, ids, htmx=False):
    url = reverse("delayq:message_action", args=[topic, state])
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(url, {"action": act, "ids": ids}, headers=headers)


@pytest.mark.parametrize("persona, replay, delete", [
    ("nobody", 403, 403), ("viewer", 403, 403), ("operator", 302, 302), ("admin_user", 302, 302)])
def test_permission_matrix_for_dead_letter_actions(request, site_queue, persona, replay, delete):
    client = request.getfixturevalue(persona)
    a, b = kill(site_queue, "orders", ["a", "b"])
    assert action(client, "orders", "dead", "replay", [a]).status_code == replay
    assert action(client, "orders", "dead", "delete", [b]).status_code == delete
    counts = site_queue.counts("orders")
    assert counts[MessageState.ready] == (1 if replay == 302 else 0)
    assert counts[MessageState.dead] == (0 if delete == 302 else 2 - counts[MessageState.ready])


def test_replay_one_plain_redirects_and_htmx_returns_the_region(operator, site_queue):
    a, b = kill(site_queue, "orders", ["a", "b"])
    plain = action(operator, "orders", "dead", "replay", [a])
    assert plain.status_code == 302 and plain["Location"].endswith("/topics/orders/default/dead/")
    fragment = action(operator, "orders", "dead", "replay", [b], htmx=True)
    html = fragment.content.decode()
    assert fragment.status_code == 200 and html.lstrip().startswith('<section id="messages"')
    assert fragment["HX-Trigger"] == "counts-changed" and f'data-id="{b}"' not in html
    assert site_queue.counts("orders")[MessageState.ready] == 2


def test_htmx_action_shows_its_result_where_the_user_clicked(operator, site_queue):
    """The fragment carries the result message out of band into the page's messages area."""
    [a] = kill(site_queue, "orders", ["a"])
    first = action(operator, "orders", "dead", "replay", [a], htmx=True).content.decode()
    assert '<div id="delayq-messages" hx-swap-oob="true">' in first and "Replayed 1 message of group default." in first
    second = action(operator, "orders", "dead", "replay", [a], htmx=True).content.decode()
    assert "Replayed 0 messages of group default; 1 skipped because it was no longer dead." in second
    assert "Replayed 1 message of group default." not in second                 # shown once, not again
    page = operator.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    assert "skipped because" not in page and '<div id="delayq-messages">' in page


def test_double_click_replays_once_and_reports_the_skip(operator, site_queue):
    [a] = kill(site_queue, "orders", ["a"])
    action(operator, "orders", "dead", "replay", [a])
    second = operator.post(reverse("delayq:message_action", args=["orders", "dead"]),
                           {"action": "replay", "ids": [a]}, follow=True)
    assert "skipped because it was no longer dead" in second.content.decode()
    assert site_queue.stats("orders")["replayed"] == 1
    entries = AuditEntry.objects.filter(action="message.replay").order_by("id")
    assert [(e.affected, e.result) for e in entries] == [(1, "ok"), (0, "partial")]


def test_row_button_without_js_acts_on_its_own_row(operator, site_queue):
    a, b = kill(site_queue, "orders", ["a", "b"])
    url = reverse("delayq:message_action", args=["orders", "dead"]) + f"?one={b}"
    operator.post(url, {"action": "replay", "ids": [a]})  # a checked box elsewhere is ignored
    assert site_queue.get("orders", b).state is MessageState.ready
    assert site_queue.get("orders", a).state is MessageState.dead


def test_deliver_now_and_cancel(operator, site_queue):
    a, b = site_queue.publish_many("orders", ["a", "b"], delay=3600)
    action(operator, "orders", "pending", "deliver_now", [a])
    action(operator, "orders", "pending", "cancel", [b])
    assert site_queue.get("orders", a).state is MessageState.ready and site_queue.get("orders", b) is None


def test_actions_refuse_the_wrong_state(operator, site_queue):
    [a] = kill(site_queue, "orders", ["a"])
    assert action(operator, "orders", "ready", "replay", [a]).status_code == 400
    assert action(operator, "orders", "dead", "launch", [a]).status_code == 400


def test_csrf_is_enforced(operator, site_queue):
    [a] = kill(site_queue, "orders", ["a"])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    assert action(strict, "orders", "dead", "replay", [a]).status_code == 403
    assert site_queue.get("orders", a).state is MessageState.dead


def test_edit_and_replay_keeps_the_diff(admin_user, site_queue):
    [a] = kill(site_queue, "orders", [json.dumps({"sku": "", "n": 1})])
    url = reverse("delayq:message_edit", args=["orders", a])
    form = admin_user.get(url)
    assert form.status_code == 200
    seen = hashlib.sha1(site_queue.get("orders", a).payload).hexdigest()
    bad = admin_user.post(url, {"payload": "{not json", "seen": seen})
    assert bad.status_code == 400 and "Not valid JSON" in bad.content.decode()
    ok = admin_user.post(url, {"payload": '{"sku": "X-1", "n": 1}', "seen": seen})
    assert ok.status_code == 302
    m = site_queue.get("orders", a)
    assert m.state is MessageState.ready and m.json() == {"sku": "X-1", "n": 1}
    diff = AuditEntry.objects.get(action="message.edit_replay").scope["diff"]
    assert '-  "sku": ""' in diff and '+  "sku": "X-1"' in diff


def test_edit_keeps_untouched_values_byte_for_byte(admin_user, site_queue):
    original = '{"price": 1.10, "big": 12345678901234567890.000, "tiny": 1e-400, "sku": "", "z": [1.0]}'
    [a] = kill(site_queue, "orders", [original])
    url = reverse("delayq:message_edit", args=["orders", a])
    text = admin_user.get(url).context["text"]
    assert '"price": 1.10' in text and "1e-400" in text and text.index('"price"') < text.index('"sku"')
    seen = hashlib.sha1(original.encode()).hexdigest()
    assert admin_user.post(url, {"payload": text.replace('"sku": ""', '"sku": "X-1"'), "seen": seen}).status_code == 302
    assert site_queue.get("orders", a).payload == original.replace('"sku": ""', '"sku":"X-1"').replace(" ", "").encode()
    diff = AuditEntry.objects.get(action="message.edit_replay").private["diff"]
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ['-  "sku": "",', '+  "sku": "X-1",']


def test_edit_diffs_are_redacted_in_the_audit_log_and_revealed_by_an_audited_post(admin_user, viewer, site_queue):
    [a] = kill(site_queue, "orders", [json.dumps({"password": "hunter2-old", "n": 1})])
    url = reverse("delayq:message_edit", args=["orders", a])
    seen = hashlib.sha1(site_queue.get("orders", a).payload).hexdigest()
    admin_user.post(url, {"payload": '{"password": "hunter2-new", "n": 2}', "seen": seen})
    entry = AuditEntry.objects.get(action="message.edit_replay")
    log = viewer.get(reverse("delayq:audit")).content.decode()
    assert "hunter2" not in log, log[log.find("hunter2") - 300:][:400]
    assert '+  &quot;n&quot;: 2' in log and "Show full diff" not in log
    assert "hunter2" not in admin_user.get(reverse("admin:delayq_auditentry_change", args=[entry.pk])).content.decode()
    reveal = reverse("delayq:audit_reveal", args=[entry.pk])
    assert viewer.post(reveal).status_code == 403
    assert "Show full diff" in admin_user.get(reverse("delayq:audit")).content.decode()
    full = admin_user.post(reveal).content.decode()
    assert "hunter2-old" in full and "hunter2-new" in full
    assert AuditEntry.objects.filter(action="audit.reveal", username="boss").count() == 1


def test_edit_refused_when_someone_changed_it_first(admin_user, site_queue):
    [a] = kill(site_queue, "orders", ['{"n": 1}'])
    url = reverse("delayq:message_edit", args=["orders", a])
    stale = hashlib.sha1(b'{"n": 0}').hexdigest()
    response = admin_user.post(url, {"payload": '{"n": 2}', "seen": stale})
    assert response.status_code == 409 and site_queue.get("orders", a).state is MessageState.dead


def test_operator_cannot_edit_payloads(operator, site_queue):
    [a] = kill(site_queue, "orders", ['{"n": 1}'])
    assert operator.get(reverse("delayq:message_edit", args=["orders", a])).status_code == 403


def test_purge_needs_the_typed_count_and_runs_as_an_operation(admin_user, operator, site_queue,
                                                              django_capture_on_commit_callbacks, monkeypatch):
    kill(site_queue, "orders", ["a", "b", "c"])
    url = reverse("delayq:purge", args=["orders", "dead"])
    assert operator.post(url, {"confirm": "3"}).status_code == 403
    wrong = admin_user.post(url, {"confirm": "2"}, follow=True)
    assert "Type the number of dead messages of group default (3)" in wrong.content.decode()
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_user.post(url, {"confirm": "3"})
    op = BulkOperation.objects.get()
    assert response.status_code == 302 and queued == [op.pk] and op.action == "purge" and op.total == 3
    assert site_queue.counts("orders")[MessageState.dead] == 3  # nothing deleted inside the request


def test_a_purge_deletes_what_was_confirmed_not_what_arrived_later(admin_user, site_queue, monkeypatch):
    from dashboard.tasks import run_bulk_operation

    seen = site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: None)
    admin_user.post(reverse("delayq:purge", args=["orders", "pending"]), {"confirm": "3"})
    op = BulkOperation.objects.get()
    while site_queue.server_ms() <= op.scope["confirmed_ms"]:
        pass
    late = site_queue.publish("orders", "late", delay=60)       # due before all three, arrived after
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert (op.total, op.moved) == (3, 3)
    assert [m.id for m in site_queue.peek("orders", "pending")] == [late]
    assert not set(seen) & {m.id for m in site_queue.peek("orders", "pending")}


def test_json_api(operator, viewer, site_queue, client):
    a, b = kill(site_queue, "orders", ["a", "b"])
    assert client.get(reverse("delayq:api_topics")).status_code == 401
    listing = viewer.get(reverse("delayq:api_messages", args=["orders", "dead"])).json()
    assert {m["id"] for m in listing["messages"]} == {a, b}
    assert listing["messages"][0]["last_error"]["message"] == "boom"
    assert viewer.post(reverse("delayq:api_replay", args=["orders"]), {"ids": [a]},
                       content_type="application/json").status_code == 403
    r = operator.post(reverse("delayq:api_replay", args=["orders"]), {"ids": [a, a, "NOPE"]},
                      content_type="application/json")
    assert r.json() == {"group": "default", "replayed": 1, "skipped": 2}
    assert operator.post(reverse("delayq:api_replay", args=["orders"]), {"ids": "x"},
                         content_type="application/json").status_code == 400
    counts = viewer.get(reverse("delayq:api_topics")).json()["topics"][0]["counts"]
    assert counts["ready"] == 1 and counts["dead"] == 1
    assert AuditEntry.objects.filter(action="message.replay", scope__via="api").exists()


def test_overview_and_topic_counts_agree_after_actions(operator, site_queue):
    ids = kill(site_queue, "orders", ["a", "b", "c"])
    action(operator, "orders", "dead", "replay", ids[:2])
    html = operator.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    assert state_counts(html)["ready"] == 2 and state_counts(html)["dead"] == 1


def test_stalled_operations_are_resumed_by_beat(site_queue, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.tasks import resume_stalled_operations

    old = timezone.now() - timedelta(minutes=5)
    stalled = BulkOperation.objects.create(topic="orders", status="running", heartbeat=old, scope={})
    BulkOperation.objects.create(topic="orders", status="running", heartbeat=timezone.now(), scope={})
    BulkOperation.objects.create(topic="orders", status="done", heartbeat=old, scope={})
    queued = []
    monkeypatch.setattr("dashboard.tasks.run_bulk_operation.delay", queued.append)
    assert resume_stalled_operations() == [stalled.pk] and queued == [stalled.pk]
    assert resume_stalled_operations() == []  # its heartbeat was renewed: one resume per stall


def test_replay_all_takes_its_scope_from_the_signed_preview_not_the_form(operator, admin_user, site_queue,
                                                                         monkeypatch):
    """A forged cutoff or total, another user's preview, another topic's: 400 and nothing started.
    The operation's size is counted by the server."""
    from django.core import signing

    from dashboard import scopes

    kill(site_queue, "orders", ["a", "b"])
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async",
                        lambda args, **kw: queued.append(*args))
    url = reverse("delayq:replay_all", args=["orders"])
    token = operator.get(url).context["scope_token"]
    forged = signing.dumps({"topic": "orders", "user": operator.user.pk, "fingerprint": "", "since_ms": 0,
                            "cutoff_ms": 10**19}, salt="not-ours")
    for bad in ("", "garbage", forged, token[:-2] + "xx"):
        response = operator.post(url, {"scope": bad, "cutoff_ms": 10**19, "total": 999})
        assert response.status_code == 400 and b"open the preview again" in response.content
    assert admin_user.post(url, {"scope": token}).status_code == 400                        # another user's
    other = reverse("delayq:replay_all", args=["emails"])
    kill(site_queue, "emails", ["c"])
    assert operator.post(other, {"scope": token}).status_code == 400                        # another topic's
    assert BulkOperation.objects.count() == 0 and queued == []
    kill(site_queue, "orders", ["late"])      # died after the preview: outside its frozen cutoff
    response = operator.post(url, {"scope": token, "total": 999})
    op = BulkOperation.objects.get()
    assert response.status_code == 302 and op.total == 2 and queued == [op.pk]
    assert scopes.read(token, "orders", "default", operator.user)["cutoff_ms"] == op.scope["cutoff_ms"]


def test_the_action_table_decides_every_button_and_every_post(admin_user, site_queue):
    """The tab, the message page and the action view agree, state by state, with action_table."""
    import re

    from dashboard import action_table

    [dead_id] = kill(site_queue, "orders", ["d"])                 # first: it claims what is ready
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(60, max_attempts=2))
    ids = {"dead": dead_id, "pending": site_queue.publish("orders", "p", delay=3600)}
    retry_id, unacked_id = site_queue.publish_many("orders", ["r", "u"])
    first, second = site_queue.claim("orders", 2)
    site_queue.nack(first if first.id == retry_id else second, "boom")
    ids.update(retrying=retry_id, unacked=unacked_id, ready=site_queue.publish("orders", "ready"))
    for state, msg_id in ids.items():
        expected = {a.name for a in action_table.ACTIONS.values() if a.row and a.applies(state)}
        tab = admin_user.get(reverse("delayq:topic_state", args=["orders", state])).content.decode()
        row = tab[tab.index(f'id="msg-{msg_id}"'):]
        row = row[:row.index("</tr>")]
        assert set(re.findall(r'name="action" value="(\w+)"', row)) == expected, state
        assert ("Purge all" in tab) == action_table.ACTIONS["purge"].applies(state), state
        page = admin_user.get(reverse("delayq:message", args=["orders", msg_id])).content.decode()
        assert set(re.findall(r'name="action" value="(\w+)"', page)) == expected, state
        assert ("Edit and replay" in page) == action_table.ACTIONS["edit_replay"].applies(state), state
        for name in set(action_table.ACTIONS) - expected:
            refused = admin_user.post(reverse("delayq:message_action", args=["orders", state]),
                                      {"action": name, "ids": [msg_id]})
            assert refused.status_code == 400, (state, name)


def test_finding_selected_row_cancel_and_kill_say_they_cannot_be_undone(admin_user, site_queue):
    """Cancel, kill and delete of selected rows are not held for undo (only the all-forms, run as
    operations, are): their confirmation says so on the tab and on the message page."""
    import html

    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(60, max_attempts=3))
    pending = site_queue.publish("orders", "p", delay=3600)
    retrying = site_queue.publish("orders", "r")
    site_queue.nack(site_queue.claim("orders", 1)[0], "boom")
    [dead] = kill(site_queue, "orders", ["d"])
    for state, msg_id, label in (("pending", pending, "Cancel"), ("retrying", retrying, "Kill"),
                                 ("dead", dead, "Delete")):
        tab = html.unescape(admin_user.get(reverse("delayq:topic_state", args=["orders", state])).content.decode())
        button = tab[tab.index(f'value="{label.lower()}"'):]
        assert "cannot be undone" in button[:button.index(">")], state
        page = admin_user.get(reverse("delayq:message", args=["orders", msg_id])).content.decode()
        assert "cannot be undone" in page, state


def test_every_api_error_is_json_with_a_message(operator, site_queue):
    site_queue.publish("orders", "x")
    state = operator.get(reverse("delayq:api_messages", args=["orders", "nostate"]))
    assert state.status_code == 404 and "no such state 'nostate'" in state.json()["error"]
    assert "dead" in state.json()["error"]
    nowhere = operator.get(reverse("delayq:api_topics").replace("topics/", "nothing/"))
    assert nowhere.status_code == 404 and nowhere["Content-Type"] == "application/json"
    assert "topics/<topic>/[<group>/]<state>/" in nowhere.json()["error"]
    wrong = operator.post(reverse("delayq:api_topics"))
    assert wrong.status_code == 405 and wrong["Allow"] == "GET" and "use GET" in wrong.json()["error"]
    bad_topic = operator.get(reverse("delayq:api_messages", args=["-bad-", "ready"]))
    assert bad_topic.status_code == 404 and bad_topic.json()["error"] == "no such topic"

    # A session POST without the CSRF token is refused, in JSON; with the token it goes through.
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    url = reverse("delayq:api_replay", args=["orders"])
    refused = strict.post(url, {"ids": ["x"]}, content_type="application/json")
    assert refused.status_code == 403 and "CSRF check failed" in refused.json()["error"]
    strict.get(reverse("delayq:overview"))        # sets the csrftoken cookie, as a browser page would
    token = strict.cookies["csrftoken"].value
    accepted = strict.post(url, {"ids": ["x"]}, content_type="application/json", headers={"X-CSRFToken": token})
    assert accepted.status_code == 200 and accepted.json() == {"group": "default", "replayed": 0, "skipped": 1}
