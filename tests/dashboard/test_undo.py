""""Undo operation #N" (views_undo.py, services/undo.py): a purge or kill operation holds what it
removed; the Operations page says until when; the undo takes the operation's own permission, is
audited, runs as an operation, starts once however often it is clicked, and says so when the time
is over. Every bulk removal the console offers holds: purge of a state (cancel all; on the dead
tab, delete all dead letters), kill all, and "cancel / delete / kill all matching"."""

from datetime import timedelta

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from dashboard.tasks import run_bulk_operation
from dashboard.templatetags.delayq import dt_time
from queue_core import MessageState
from tests.queue_core.helpers import poll

from .test_pages import kill

pytestmark = pytest.mark.django_db


@pytest.fixture
def inline(monkeypatch):
    """Operations are queued for Celery; these tests run each one here with run_bulk_operation
    (tests/dashboard/test_operations.py runs them in a real worker)."""
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: None)


def purged(admin_user, site_queue, state="pending", n=3):
    admin_user.post(reverse("delayq:purge", args=["orders", state]), {"confirm": str(n)})
    op = BulkOperation.objects.get(action="purge")
    assert run_bulk_operation(op.pk) == "done"
    return op


def test_a_purge_can_be_undone_until_its_time_and_the_undo_puts_everything_back(admin_user, site_queue, inline):
    ids = site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    assert site_queue.counts("orders")[MessageState.pending] == 0
    page = admin_user.get(reverse("delayq:operations")).content.decode()
    assert "can be undone until" in page and f"Undo operation #{op.pk}" in page
    assert "can be undone until" in admin_user.get(reverse("delayq:operation", args=[op.pk])).content.decode()

    response = admin_user.post(reverse("delayq:operation_undo", args=[op.pk]))
    undo = BulkOperation.objects.get(action="undo")
    assert response.status_code == 302 and response.url == reverse("delayq:operation", args=[undo.pk])
    assert undo.total == 3 and undo.scope == {"undoes": op.pk, "kind": "purge", "hold": f"op-{op.pk}"}
    assert run_bulk_operation(undo.pk) == "done"
    undo.refresh_from_db()
    assert (undo.moved, undo.skipped) == (3, 0)
    assert sorted(m.id for m in site_queue.peek("orders", "pending")) == sorted(ids)
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"purge_operation.done", "undo_operation.start", "undo_operation.done"} <= actions
    assert "can no longer be undone" in admin_user.get(reverse("delayq:operations")).content.decode()


def test_undo_takes_the_permission_of_the_operations_own_kind(admin_user, operator, viewer, site_queue, inline):
    site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    url = reverse("delayq:operation_undo", args=[op.pk])
    assert operator.post(url).status_code == 403     # purge_topic is the admin's
    assert viewer.post(url).status_code == 403
    assert f"Undo operation #{op.pk}" not in operator.get(reverse("delayq:operations")).content.decode()
    assert operator.get(url).status_code == 405      # POST only
    assert not BulkOperation.objects.filter(action="undo").exists()


def test_a_kill_operation_is_undone_by_an_operator_back_to_retrying(admin_user, operator, site_queue, inline):
    from queue_core import RetryPolicy

    site_queue.configure_topic("orders", retry=RetryPolicy.fixed(3600, max_attempts=5))
    site_queue.publish_many("orders", ["a", "b"])
    for d in site_queue.claim("orders", 2):
        site_queue.nack(d, "boom")
    url = reverse("delayq:bulk_state", args=["orders", "retrying", "kill"])
    preview = operator.get(url)
    assert preview.status_code == 200
    operator.post(url, {"scope": preview.context["scope_token"]})
    op = BulkOperation.objects.get(action="kill")
    assert run_bulk_operation(op.pk) == "done"
    assert site_queue.counts("orders")[MessageState.dead] == 2
    operator.post(reverse("delayq:operation_undo", args=[op.pk]))
    assert run_bulk_operation(BulkOperation.objects.get(action="undo").pk) == "done"
    counts = site_queue.counts("orders")
    assert (counts[MessageState.retrying], counts[MessageState.dead]) == (2, 0)


def test_a_second_click_starts_nothing_twice(admin_user, site_queue, inline):
    site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    url = reverse("delayq:operation_undo", args=[op.pk])
    admin_user.post(url)
    second = admin_user.post(url, follow=True)
    assert BulkOperation.objects.filter(action="undo").count() == 1
    assert "already being undone" in second.content.decode()
    undo = BulkOperation.objects.get(action="undo")
    assert run_bulk_operation(undo.pk) == "done"
    assert admin_user.post(url).status_code == 302
    assert BulkOperation.objects.filter(action="undo").count() == 1
    assert site_queue.counts("orders")[MessageState.pending] == 3


def test_undo_after_the_time_is_over_says_so_and_changes_nothing(admin_user, site_queue, inline, settings):
    settings.DELAYQ_UNDO_HOURS = 0.5 / 3600          # half a second
    site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    poll(lambda: not site_queue.held("orders"), timeout=5)
    page = admin_user.post(reverse("delayq:operation_undo", args=[op.pk]), follow=True).content.decode()
    assert f"Operation #{op.pk} can no longer be undone" in page
    assert not BulkOperation.objects.filter(action="undo").exists()
    assert AuditEntry.objects.filter(action="undo_operation.start", result="refused").exists()
    assert site_queue.counts("orders")[MessageState.pending] == 0


def test_an_operation_that_removes_nothing_offers_no_undo(admin_user, site_queue, inline):
    kill(site_queue, "orders", ["a"])
    preview = admin_user.get(reverse("delayq:replay_all", args=["orders"]))
    admin_user.post(reverse("delayq:replay_all", args=["orders"]), {"scope": preview.context["scope_token"],
                                                                  "rate_limit": 1000})
    op = BulkOperation.objects.get(action="replay")
    page = admin_user.post(reverse("delayq:operation_undo", args=[op.pk]), follow=True).content.decode()
    assert "removes nothing, so there is nothing to undo" in page
    assert not BulkOperation.objects.filter(action="undo").exists()


def test_the_undo_post_needs_the_csrf_token(admin_user, site_queue, inline):
    from django.test import Client

    site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user.user)
    assert strict.post(reverse("delayq:operation_undo", args=[op.pk])).status_code == 403
    page = strict.get(reverse("delayq:operations")).content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and f"Undo operation #{op.pk}" in page
    assert not BulkOperation.objects.filter(action="undo").exists()


def test_finding_an_undone_operation_cannot_be_resumed_nor_undone_twice(admin_user, site_queue, inline):
    site_queue.publish_many("orders", ["a", "b", "c"], delay=3600)
    op = purged(admin_user, site_queue)
    BulkOperation.objects.filter(pk=op.pk).update(status=BulkOperation.Status.FAILED)   # its last batch failed
    admin_user.post(reverse("delayq:operation_undo", args=[op.pk]))
    undo = BulkOperation.objects.get(action="undo")
    assert run_bulk_operation(undo.pk) == "done"
    assert site_queue.counts("orders")[MessageState.pending] == 3

    page = admin_user.post(reverse("delayq:operation_resume", args=[op.pk]), follow=True).content.decode()
    assert f"was undone by operation #{undo.pk}, so it cannot be resumed" in page
    assert BulkOperation.objects.get(pk=op.pk).status == BulkOperation.Status.FAILED   # not queued again
    assert site_queue.counts("orders")[MessageState.pending] == 3
    assert AuditEntry.objects.filter(action="purge_operation.resume", result="refused").exists()

    page = admin_user.post(reverse("delayq:operation_undo", args=[op.pk]), follow=True).content.decode()
    assert f"was undone already, by operation #{undo.pk} (done)" in page
    assert BulkOperation.objects.filter(action="undo").count() == 1


def test_finding_the_operation_page_says_undo_status_unavailable_when_redis_is_down(admin_user, site_queue, inline,
                                                                                   settings):
    site_queue.publish_many("orders", ["a"], delay=3600)
    op = purged(admin_user, site_queue, n=1)
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:9/0"   # nothing listens there
    page = admin_user.get(reverse("delayq:operation", args=[op.pk]))
    assert page.status_code == 200
    assert "undo status unavailable (Redis unreachable)" in page.content.decode()
    assert admin_user.get(reverse("delayq:operations")).status_code == 200


def test_finding_a_purge_when_redis_is_full_runs_and_says_nothing_was_held(admin_user, site_queue, inline):
    site_queue.publish_many("orders", ["x" * 20_000] * 30, delay=3600)
    r = site_queue.redis
    old = r.config_get("maxmemory*")
    try:
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", r.info("memory")["used_memory"] - 100_000)
        op = purged(admin_user, site_queue, n=30)
    finally:
        r.config_set("maxmemory", old["maxmemory"])
        r.config_set("maxmemory-policy", old["maxmemory-policy"])
    assert site_queue.counts("orders")[MessageState.pending] == 0
    page = admin_user.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert "nothing can be undone: 30 destroyed without a copy" in page
    assert f"Undo operation #{op.pk}" not in page


def facts(q, topic, ids) -> dict:
    """What a message is in its state, as the console shows it: the state, payload, attempts, due
    or death time (its score), and its last error (type, words, error group)."""
    out = {}
    for i in ids:
        m = q.get(topic, i)
        error = m.last_error
        out[i] = (m.state, m.payload, m.attempts, m.score, m.dead_at,
                  (error.type, error.message, error.fingerprint) if error else None)
    return out


def says_until_when(client, q, op, topic="orders") -> None:
    """The operation's page and the Operations page say until when it can be undone: when its
    holding area expires, DELAYQ_UNDO_HOURS (24) after the operation held its first message."""
    [held] = [h for h in q.held(topic) if h.operation == f"op-{op.pk}"]
    op.refresh_from_db()
    assert abs(held.until - op.started - timedelta(hours=24)) < timedelta(minutes=1)
    until = f"can be undone until {dt_time(held.until, 'plain')}"
    assert until in client.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    operations = client.get(reverse("delayq:operations")).content.decode()
    row = operations.split(f'href="{reverse("delayq:operation", args=[op.pk])}"', 1)[1].split("</tr>", 1)[0]
    assert until in row and f"Undo operation #{op.pk}" in row


def undone(client, q, op, n, topic="orders") -> BulkOperation:
    """Clicks Undo, runs the undo operation and checks its audit: who started it, for which
    operation, how many it put back."""
    response = client.post(reverse("delayq:operation_undo", args=[op.pk]))
    undo = BulkOperation.objects.get(action="undo")
    assert response.status_code == 302 and response.url == reverse("delayq:operation", args=[undo.pk])
    assert run_bulk_operation(undo.pk) == "done"
    undo.refresh_from_db()
    assert (undo.total, undo.moved, undo.skipped) == (n, n, 0)
    start = AuditEntry.objects.get(action="undo_operation.start")
    assert (start.username, start.topic, start.requested, start.result) == (client.user.username, topic, n, "ok")
    assert start.scope == {"undoes": op.pk, "kind": op.action, "hold": f"op-{op.pk}"}
    done = AuditEntry.objects.get(action="undo_operation.done")
    assert (done.topic, done.affected, done.result) == (topic, n, "ok")
    assert done.detail.startswith(f"operation #{undo.pk}: moved {n}, skipped 0")
    assert [h for h in q.held(topic) if h.operation == f"op-{op.pk}"][0].messages == 0   # nothing left held
    return undo


def restored_by(q, ids, undo, op, topic="orders") -> None:
    """Each message's history ends with its return, by the undo operation, naming what it undid."""
    for i in ids:
        last = q.get(topic, i).history[-1]
        assert (last.event, last.actor, last.detail) == ("restored", f"undo-operation:{undo.pk}",
                                                          f"undo of operation op-{op.pk}")


def test_it_undoes_a_delete_all_of_dead_letters(admin_user, site_queue, inline):
    """"Purge" on the dead tab deletes every dead letter of the group: held, and put back as the dead
    letters they were (error, error group, attempts, time of death), nothing else touched."""
    dead = kill(site_queue, "orders", ["a", "b"], error="boom") + kill(site_queue, "orders", ["c"], error="bang")
    before = facts(site_queue, "orders", dead)
    groups_before = [(g.fingerprint, g.count) for g in site_queue.error_groups("orders")]
    other = site_queue.publish("orders", "stays", delay=3600)
    op = purged(admin_user, site_queue, state="dead", n=3)
    op.refresh_from_db()
    assert (op.scope["state"], op.moved) == ("dead", 3) and site_queue.counts("orders")[MessageState.dead] == 0
    assert site_queue.error_groups("orders") == []
    says_until_when(admin_user, site_queue, op)
    [late] = kill(site_queue, "orders", ["after the purge"])           # not removed by it: stays as it is

    undo = undone(admin_user, site_queue, op, 3)
    assert facts(site_queue, "orders", dead) == before
    assert {m.id for m in site_queue.peek("orders", "dead", limit=10)} == {*dead, late}
    assert sorted((g.fingerprint, g.count) for g in site_queue.error_groups("orders")) == sorted(
        [(fp, n + (fp == site_queue.get("orders", late).last_error.fingerprint)) for fp, n in groups_before])
    assert site_queue.get("orders", other).state is MessageState.pending
    restored_by(site_queue, dead, undo, op)


@pytest.mark.parametrize(("state", "action"), [("pending", "cancel"), ("dead", "delete")])
def test_it_undoes_an_all_matching_removal(admin_user, site_queue, inline, state, action):
    """"Cancel all matching" on the pending tab and "Delete all matching" on the dead tab run as a
    purge operation over the query's matches: what they removed is held, Undo puts back exactly the
    matches, in the state they left, and the messages the query did not match are untouched."""
    payloads = [{"n": i % 3} for i in range(12)]
    ids = (site_queue.publish_many("orders", payloads, delay=3600) if state == "pending"
           else kill(site_queue, "orders", payloads))
    matched = [i for i, p in zip(ids, payloads, strict=True) if p["n"] == 1]
    before = facts(site_queue, "orders", ids)
    url = reverse("delayq:matching", args=["orders", "default", state, action])
    preview = admin_user.get(url, {"q": "payload.n:1"})
    assert preview.status_code == 200 and preview.context["count"] == 4
    assert admin_user.post(url, {"scope": preview.context["scope_token"]}).status_code == 302
    op = BulkOperation.objects.get(action="purge")
    assert op.scope["query"] and op.scope["state"] == state
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 4 and site_queue.counts("orders")[state] == 8
    assert not set(matched) & {m.id for m in site_queue.peek("orders", state, limit=20)}
    says_until_when(admin_user, site_queue, op)

    undo = undone(admin_user, site_queue, op, 4)
    assert facts(site_queue, "orders", ids) == before       # the matches as they were; the rest never moved
    assert site_queue.counts("orders")[state] == 12
    restored_by(site_queue, matched, undo, op)
