"""publish_on_commit with real database transactions: after commit only, nothing on rollback."""

import pytest
from django.db import transaction

from dashboard import publish_on_commit
from dashboard.models import RetryPolicy

pytestmark = pytest.mark.django_db(transaction=True)


def test_published_only_after_the_commit(site_queue):
    with transaction.atomic():
        RetryPolicy.objects.create(name="row-1")
        publish_on_commit("orders", {"row": 1}, key="row-1")
        assert site_queue.counts("orders")["ready"] == 0          # not before the commit
    [message] = site_queue.peek("orders", "ready")
    assert message.json() == {"row": 1} and message.key == "row-1"


def test_nothing_on_rollback(site_queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        RetryPolicy.objects.create(name="row-2")
        publish_on_commit("orders", {"row": 2})
        raise RuntimeError("the view failed")
    assert not RetryPolicy.objects.filter(name="row-2").exists()
    assert "orders" not in site_queue.topics() or sum(site_queue.counts("orders").values()) == 0


def test_a_retried_operation_publishes_once_by_key(site_queue):
    for _ in range(2):
        with transaction.atomic():
            publish_on_commit("orders", {"row": 3}, key="row-3")
    assert site_queue.counts("orders")["ready"] == 1


def test_outside_a_transaction_it_publishes_at_once(site_queue):
    publish_on_commit("orders", "now")
    assert site_queue.counts("orders")["ready"] == 1
