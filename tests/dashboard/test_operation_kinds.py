"""One table of bulk-operation kinds (dashboard.operation_kinds) read by the model, the views and the
task; one helper for the audited failures of the operator actions."""

import io

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.urls import reverse

from dashboard import action_table
from dashboard.models import AuditEntry, BulkOperation
from dashboard.operation_kinds import KINDS
from queue_core import DelayQueue, RetryPolicy
from queue_core.contrib import localserver

from .test_actions import action
from .test_pages import kill

pytestmark = pytest.mark.django_db


def test_finding_one_table_of_bulk_operation_kinds_drives_the_model():
    field = BulkOperation._meta.get_field("action")
    assert [value for value, _ in field.choices] == list(KINDS)
    # The choices moved into the table unchanged: the migrations still describe the model.
    out = io.StringIO()
    call_command("makemigrations", "delayq", "--check", "--dry-run", stdout=out)
    for kind in KINDS.values():
        own = {"backfill": "publish_message",       # publishes a schedule's ticks
               "index_build": "manage_topics"}      # lists a topic's messages in its indexes
        if kind.name == "undo":       # puts back what a purge or kill held: that operation's permission
            for undone in ("purge", "kill"):
                op = BulkOperation(action="undo", topic="orders", group="billing",
                                   scope={"undoes": 7, "kind": undone, "hold": "op-7"})
                assert op.permission == KINDS[undone].permission and "group billing in orders" in op.words
            continue
        if kind.name in own:          # the bulk form of no message action: a permission of its own
            assert kind.name not in action_table.ACTIONS and kind.permission == own[kind.name]
            continue
        # A kind's permission is that of the action it is the bulk form of: the tables agree.
        assert kind.permission == action_table.ACTIONS[kind.name].perm
        op = BulkOperation(action=kind.name, topic="orders", group="billing",
                           scope={"state": "retrying", "cutoff_ms": 0, "due_ms": 0, "since_ms": 0,
                                  "fingerprint": "", "group": "default", "over_ms": 600_000})
        assert (op.permission, op.moved_label) == (kind.permission, kind.moved_label)
        assert "group billing in orders" in op.words   # the operation's group, whatever its scope says
    assert {k for k, kind in KINDS.items() if kind.walks} == {"reschedule", "kill", "spread", "backfill", "index_build",
                                                                    "undo"}
    assert {k for k, kind in KINDS.items() if kind.keeps_cursor} == {"backfill", "index_build", "spread"}


def test_finding_only_the_walking_kinds_start_from_a_state_preview(admin_user, site_queue):
    site_queue.configure_topic("orders", retry=RetryPolicy.fixed(3600, max_attempts=5))
    site_queue.publish("orders", b"x")
    site_queue.nack(site_queue.claim("orders", 1)[0], "boom")
    for name in ("replay", "purge", "backfill", "spread", "undo", "nothing"):   # spread: its own preview (views_forecast)
        url = reverse("delayq:bulk_state", args=["orders", "retrying", name])
        assert admin_user.get(url).status_code == 404, name
    preview = admin_user.get(reverse("delayq:bulk_state", args=["orders", "retrying", "kill"]))
    assert preview.status_code == 200
    assert preview.context["confirm_label"] == "Kill 1 retrying message of group default in orders"


@pytest.fixture
def doomed_redis(settings, tmp_path):
    """A Redis of the test's own (even when REDIS_URL names a shared one), which the test stops half way."""
    server = localserver.start(kind="auto", data_dir=tmp_path)
    settings.DELAYQ_REDIS_URL = server.url
    cache.clear()
    q = DelayQueue.from_url(server.url)
    yield server, q
    q.redis.close()
    server.stop()


def test_finding_one_helper_for_audited_failures_keeps_each_result_and_message(operator, admin_user, doomed_redis):
    server, q = doomed_redis
    (a,) = kill(q, "orders", ["a"])
    assert operator.get(reverse("delayq:topic_state", args=["orders", "default", "dead"])).status_code == 200
    server.stop()   # the topic's groups stay cached a moment: the action itself meets Redis down
    response = action(operator, "orders", "dead", "replay", [a])
    assert response.status_code == 302
    shown = [str(m) for m in operator.get(response["Location"]).context["messages"]]
    assert any(m.startswith("Redis is unreachable") for m in shown), shown
    entry = AuditEntry.objects.get(action="message.replay")
    assert (entry.result, entry.requested, entry.affected, entry.message_ids) == ("error", 1, 0, [a])
