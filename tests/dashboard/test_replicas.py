"""The dashboard with replica-acknowledged writes (DELAYQ_REDIS_WAIT_REPLICAS) when the only
replica is frozen: the operator is told the change happened on the master but was not confirmed,
and the audit log says so."""

import pytest
from django.core.cache import cache
from django.urls import reverse

from dashboard.models import AuditEntry
from queue_core import DelayQueue, MessageState
from tests.ha.conftest import replicated  # noqa: F401 - the fixture
from tests.ha.test_wait_replicas import frozen

from .test_actions import action
from .test_pages import kill

pytestmark = pytest.mark.django_db


@pytest.fixture
def durable_site(replicated, settings):  # noqa: F811
    settings.DELAYQ_REDIS_URL = replicated.master.url
    settings.DELAYQ_REDIS_WAIT_REPLICAS = 1
    settings.DELAYQ_REDIS_WAIT_TIMEOUT = 0.3
    cache.clear()
    q = DelayQueue.from_url(replicated.master.url)
    yield q
    q.redis.close()


def test_a_replay_without_the_replicas_acknowledgement_is_reported_not_hidden(replicated, durable_site, operator):  # noqa: F811
    a, b = kill(durable_site, "orders", ["a", "b"])
    with frozen(replicated.replicas[0]):
        page = action(operator, "orders", "dead", "replay", [a])
        api = operator.post(reverse("delayq:api_replay", args=["orders"]), {"ids": [b]},
                            content_type="application/json")
    assert page.status_code == 302
    shown = [str(m) for m in operator.get(page["Location"]).context["messages"]]
    assert any("reached the master but only 0 of 1 replica(s)" in m for m in shown), shown
    assert api.status_code == 503 and api.json()["unconfirmed"] == [b]
    # Both replays happened on the master: the dashboard says what is true, not what was hoped.
    assert durable_site.counts("orders")[MessageState.ready] == 2
    entries = AuditEntry.objects.filter(action="message.replay").order_by("at")
    assert [(e.result, e.affected) for e in entries] == [("unconfirmed", 1), ("unconfirmed", 1)]
