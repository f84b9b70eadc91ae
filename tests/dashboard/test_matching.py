"""Act on everything a query matches: preview (count, samples, scope in words) -> signed frozen
scope -> a BulkOperation run by a real Celery worker; what arrives or changes after the preview
is left alone."""

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation
from queue_core import MessageState
from queue_core import RetryPolicy as EnginePolicy
from tests.conftest import wait_for

from .test_operations import op_status, worker  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def dead_letters(q, topic, payloads):
    q.configure_topic(topic, retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = q.publish_many(topic, payloads)
    for d in q.claim(topic, len(payloads)):
        q.nack(d, TimeoutError("upstream") if d.message.json().get("slow") else KeyError("sku"))
    return ids


def test_replay_all_matching_acts_only_on_what_the_preview_saw(operator, site_queue, worker):  # noqa: F811
    ids = dead_letters(site_queue, "orders", [{"tenant": "acme" if i % 3 == 0 else "globex", "slow": i % 2 == 0}
                                              for i in range(60)])
    want = {i for n, i in enumerate(ids) if n % 3 == 0 and n % 2 == 0}
    url = reverse("delayq:matching", args=["orders", "default", "dead", "replay"])
    tab = operator.get(reverse("delayq:topic_state", args=["orders", "dead"]), {"q": "payload.tenant:acme error:timeout"})
    assert 'data-testid="matching-replay"' in tab.content.decode()
    preview = operator.get(url, {"q": "payload.tenant:acme error:timeout"})
    html = preview.content.decode()
    assert preview.status_code == 200 and preview.context["count"] == len(want) and preview.context["exact"]
    assert len(preview.context["samples"]) == 5 and {s["m"].id for s in preview.context["samples"]} <= want
    assert "matching “payload.tenant:acme error:timeout”" in html
    # After the preview: a new matching dead letter arrives; it was not previewed, so it stays.
    [late] = dead_letters(site_queue, "orders", [{"tenant": "acme", "slow": True}])
    response = operator.post(url, {"scope": preview.context["scope_token"]})
    assert response.status_code == 302
    op = BulkOperation.objects.get()
    assert (op.action, op.total) == ("replay", len(want))
    wait_for(lambda: op_status(op) == "done", 60, "operation done")
    assert op.moved == len(want) and op.skipped == 0
    assert {m.id for m in site_queue.peek("orders", "ready", limit=100)} == want
    assert site_queue.get("orders", late).state is MessageState.dead
    assert site_queue.counts("orders")[MessageState.dead] == 60 - len(want) + 1
    assert AuditEntry.objects.filter(action="replay_operation.start").exists()


def test_cancel_all_matching_needs_purge_and_a_signed_scope(operator, admin_user, site_queue, worker):  # noqa: F811
    ids = site_queue.publish_many("orders", [{"n": i % 4} for i in range(40)], delay=600)
    url = reverse("delayq:matching", args=["orders", "default", "pending", "cancel"])
    assert operator.get(url, {"q": "payload.n:1"}).status_code == 403        # a bulk cancel is a purge
    assert admin_user.post(url, {"scope": "forged"}).status_code == 400
    assert admin_user.get(url).status_code == 400                             # no query, nothing to act on
    wrong = reverse("delayq:matching", args=["orders", "default", "pending", "delete"])
    assert admin_user.get(wrong, {"q": "payload.n:1"}).status_code == 400     # pending is cancelled, not deleted
    preview = admin_user.get(url, {"q": "payload.n:1"})
    assert preview.context["count"] == 10
    admin_user.post(url, {"scope": preview.context["scope_token"]})
    op = BulkOperation.objects.get()
    wait_for(lambda: op_status(op) == "done", 60, "operation done")
    assert op.moved == 10 and site_queue.counts("orders")[MessageState.pending] == 30
    assert all(site_queue.get("orders", i) is None for i in ids[1::4])
