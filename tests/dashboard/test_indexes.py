"""Indexed fields declared in the admin (Topic.indexed_fields): audited, written to the engine
with the topic's configuration, built in the background by an index_build operation when the
topic already holds messages, and read by a tab's equality query."""

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation, RetryPolicy, Topic
from dashboard.tasks import run_bulk_operation

from .test_admin import INLINE_EMPTY, TOPIC_FORM

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(site_queue, django_capture_on_commit_callbacks, monkeypatch):
    policy = RetryPolicy.objects.create(name="p", kind="exponential", jitter=0)
    with django_capture_on_commit_callbacks(execute=True):
        topic = Topic.objects.create(name="orders", retry_policy=policy)
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    return topic, queued


def _save(client, topic, fields: str, capture):
    data = {**TOPIC_FORM, **INLINE_EMPTY, "name": topic.name, "retry_policy": topic.retry_policy_id,
            "indexed_fields": fields}
    with capture(execute=True):
        return client.post(reverse("admin:delayq_topic_change", args=[topic.pk]), data, follow=True)


def test_an_index_declared_on_a_topic_with_messages_is_built_by_an_operation(
        admin_user, operator, orders, site_queue, django_capture_on_commit_callbacks):
    topic, queued = orders
    ids = site_queue.publish_many("orders", [{"customer": {"id": i % 10}} for i in range(200)])
    page = _save(admin_user, topic, "payload.customer.id\n", django_capture_on_commit_callbacks)
    assert page.status_code == 200
    op = BulkOperation.objects.get()
    assert (op.action, op.total, op.topic) == ("index_build", 200, "orders") and queued == [op.pk]
    assert [i.ready for i in site_queue.indexes("orders")] == [False]
    assert AuditEntry.objects.filter(action="topic.change", topic="orders").exists()
    assert AuditEntry.objects.filter(action="index_build_operation.start").exists()
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 200 and [i.ready for i in site_queue.indexes("orders")] == [True]
    tab = operator.get(reverse("delayq:topic_state", args=["orders", "default", "ready"]),
                       {"q": "payload.customer.id:3"})
    assert tab.status_code == 200
    scan = tab.context["scan"]
    assert scan.total == 20 and scan.done and {m.id for m in scan.messages} == set(ids[3::10])


def test_an_index_on_an_empty_topic_is_ready_at_once_and_a_bad_field_is_a_form_error(
        admin_user, orders, site_queue, django_capture_on_commit_callbacks):
    topic, queued = orders
    _save(admin_user, topic, "header.tenant", django_capture_on_commit_callbacks)
    assert [(i.field, i.ready) for i in site_queue.indexes("orders")] == [("header.tenant", True)]
    assert not BulkOperation.objects.exists() and not queued
    bad = _save(admin_user, topic, "attempts\npayload.a", django_capture_on_commit_callbacks)
    assert "payload.&lt;path&gt; or header.&lt;name&gt;" in bad.content.decode()
    assert [i.field for i in site_queue.indexes("orders")] == ["header.tenant"]
    Topic.objects.filter(pk=topic.pk).update(indexed_fields="payload.a")
    from dashboard import services
    assert services.drift(Topic.objects.get(pk=topic.pk)).differences["indexed fields"] == (
        ["header.tenant"], ["payload.a"])


def test_a_build_says_how_many_messages_it_listed_with_only_their_first_values(
        admin_user, orders, site_queue, django_capture_on_commit_callbacks):
    """A message published before its field was declared may hold more values there than a
    publish would take (MAX_ENTRIES): the build lists its first ones, and the operation page says
    how many such messages it met, beside those listed whole."""
    from queue_core.indexes import MAX_ENTRIES

    topic, _queued = orders
    site_queue.publish_many("orders", [{"tags": [f"t{i}"]} for i in range(9)])
    site_queue.publish("orders", {"tags": [f"t{n}" for n in range(MAX_ENTRIES + 5)]})
    _save(admin_user, topic, "payload.tags", django_capture_on_commit_callbacks)
    op = BulkOperation.objects.get()
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert (op.moved, op.skipped) == (9, 1)
    page = admin_user.get(reverse("delayq:operation", args=[op.pk]))
    assert page.status_code == 200
    assert f"Listed in part (only the first {MAX_ENTRIES} values of its indexed fields)" in page.content.decode()
    found = site_queue.search("orders", "ready", f"payload.tags:t{MAX_ENTRIES - 1}", limit=5)
    assert len(found.messages) == 1          # within the first values: found
