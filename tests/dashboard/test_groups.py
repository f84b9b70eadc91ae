"""Consumer groups and partitions in the console: every page, action, bulk operation, audit entry
and API call is scoped to one group, and says which."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry, BulkOperation, ConsumerGroup, RetryPolicy, Topic
from queue_core import MessageState
from queue_core import RetryPolicy as EnginePolicy

from .helpers import state_counts

pytestmark = pytest.mark.django_db


def two_groups(q, topic="orders", dead_in_billing=("a", "b"), ready=("r",)):
    """``topic`` with groups default and billing; the ``dead_in_billing`` payloads died in billing
    only (default holds them ready), the ``ready`` ones are ready in both. Returns the dead ids."""
    q.configure_topic(topic, retry=EnginePolicy.fixed(0, max_attempts=1))
    q.configure_group(topic, "billing", retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = q.publish_many(topic, list(dead_in_billing))
    for d in q.claim(topic, len(ids), group="billing"):
        q.nack(d, "card declined")
    q.publish_many(topic, list(ready))
    return ids


def counts(q, topic, group):
    return {s.value: n for s, n in q.counts(topic, group=group).items() if n}


def test_the_topic_page_shows_one_group_with_a_switcher(viewer, site_queue):
    dead = two_groups(site_queue)
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "billing", "dead"])).content.decode()
    assert '<span data-testid="current-group">billing</span>' in html
    assert state_counts(html.split('id="counts"')[1].split("</section>")[0]) == {
        "pending": 0, "ready": 1, "unacked": 0, "retrying": 0, "dead": 2}
    assert all(f'data-id="{i}"' in html for i in dead)
    switcher = re.search(r'data-testid="group-switcher">(.*?)</nav>', html, re.S).group(1)
    assert 'href="/topics/orders/default/dead/"' in switcher and 'href="/topics/orders/billing/dead/"' in switcher
    assert "Error groups of group billing" in html and "card declined" in html
    # The default group holds the same messages ready, none dead.
    default = viewer.get(reverse("delayq:topic_state", args=["orders", "default", "dead"])).content.decode()
    assert "No dead messages" in default
    # The short address is the default group's.
    assert "No dead messages" in viewer.get("/topics/orders/dead/").content.decode()
    missing = viewer.get("/topics/orders/nosuch/ready/")
    assert missing.status_code == 404


def test_replaying_in_one_group_changes_only_its_counts_and_audits_the_group(operator, site_queue):
    a, b = two_groups(site_queue)
    before_default = counts(site_queue, "orders", "default")
    url = reverse("delayq:message_action", args=["orders", "billing", "dead"])
    response = operator.post(url, {"action": "replay", "ids": [a]}, follow=True)
    assert "Replayed 1 message of group billing." in response.content.decode()
    assert counts(site_queue, "orders", "billing") == {"ready": 2, "dead": 1}
    assert counts(site_queue, "orders", "default") == before_default
    entry = AuditEntry.objects.get(action="message.replay")
    assert (entry.topic, entry.group, entry.message_ids, entry.affected) == ("orders", "billing", [a], 1)
    # Compare-and-set within the group: the same id posted to the default group's dead tab moves nothing.
    again = operator.post(reverse("delayq:message_action", args=["orders", "default", "dead"]),
                          {"action": "replay", "ids": [b]}, follow=True)
    assert "1 skipped because it was no longer dead" in again.content.decode()
    assert counts(site_queue, "orders", "billing")["dead"] == 1


def test_replay_all_is_scoped_to_the_group_and_says_so(operator, site_queue, monkeypatch,
                                                       django_capture_on_commit_callbacks):
    two_groups(site_queue, dead_in_billing=[str(i) for i in range(3)])
    preview = operator.get(reverse("delayq:replay_all", args=["orders", "billing"]))
    html = preview.content.decode()
    assert "Replay 3 dead letters of group billing in orders" in html
    assert "dead letters of group billing in orders" in html       # the scope in words
    token = re.search(r'name="scope" value="([^"]+)"', html).group(1)
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    # The preview's token is the billing group's: the default group's confirmation refuses it.
    wrong = operator.post(reverse("delayq:replay_all", args=["orders", "default"]), {"scope": token})
    assert wrong.status_code == 400 and b"another topic, group or user" in wrong.content
    with django_capture_on_commit_callbacks(execute=True):
        done = operator.post(reverse("delayq:replay_all", args=["orders", "billing"]), {"scope": token}, follow=True)
    assert "3 dead letters of group billing in orders" in done.content.decode()
    op = BulkOperation.objects.get()
    assert (op.group, op.total, queued) == ("billing", 3, [op.pk])
    assert AuditEntry.objects.get(action="replay_operation.start").group == "billing"
    from dashboard.tasks import run_bulk_operation
    assert run_bulk_operation(op.pk) == "done"
    assert counts(site_queue, "orders", "billing") == {"ready": 4}
    assert counts(site_queue, "orders", "default") == {"ready": 4}
    operations = operator.get(reverse("delayq:operations")).content.decode()
    assert '<td role="cell" data-label="group">billing</td>' in operations


def test_purge_and_pause_act_on_one_group(admin_user, site_queue, monkeypatch, django_capture_on_commit_callbacks):
    two_groups(site_queue)
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.post(reverse("delayq:purge", args=["orders", "billing", "dead"]), {"confirm": "2"})
    from dashboard.tasks import run_bulk_operation
    assert run_bulk_operation(queued[0]) == "done"
    assert counts(site_queue, "orders", "billing") == {"ready": 1}
    assert counts(site_queue, "orders", "default") == {"ready": 3}
    admin_user.post(reverse("delayq:topic_pause", args=["orders", "billing"]), {"paused": "1"})
    assert site_queue.group_config("orders", "billing").paused
    assert not site_queue.group_config("orders", "default").paused
    assert AuditEntry.objects.filter(action="topic.pause", group="billing").exists()


def test_the_message_page_shows_group_partition_ttl_and_the_key_holder(viewer, site_queue):
    site_queue.configure_topic("orders", partitions=3)
    site_queue.configure_group("orders", "ship", ordered=True, ttl=600)
    first = site_queue.publish("orders", "1", order_key="cust-7")
    second = site_queue.publish("orders", "2", order_key="cust-7", ttl=30)
    [held] = site_queue.claim("orders", 1, group="ship")
    assert held.id == first
    page = viewer.get(reverse("delayq:message", args=["orders", "ship", second])).content.decode()
    assert re.search(r'data-testid="group">ship<', page)
    partition = site_queue.get("orders", second, group="ship").partition
    assert f'data-testid="partition">{partition}<' in page
    assert re.search(r'data-testid="ttl">30(\.0)? s, then dead', page)
    assert f'held by <a href="/topics/orders/ship/messages/{first}/"' in page
    holder = viewer.get(reverse("delayq:message", args=["orders", "ship", first])).content.decode()
    assert "this message holds the key" in holder
    assert "data-testid=\"ttl\">10 min (the group's default)" in holder     # 600 s, in words
    # In the default group (not ordered) the key is shown but not held.
    plain = viewer.get(reverse("delayq:message", args=["orders", second])).content.decode()
    assert "(group default is not ordered)" in plain


def test_the_partition_filter_shows_one_partition(viewer, site_queue):
    site_queue.configure_topic("orders", partitions=3)
    ids = site_queue.publish_many("orders", [str(i) for i in range(30)])
    by_partition = {}
    for i in ids:
        by_partition.setdefault(site_queue.get("orders", i).partition, []).append(i)
    assert len(by_partition) > 1
    p, members = next(iter(sorted(by_partition.items())))
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "default", "ready"]) + f"?p={p}").content.decode()
    shown = set(re.findall(r'<tr id="msg-([^"]+)"', html))
    assert shown == set(members)
    assert f'<option value="{p}" selected>' in html


def test_the_api_is_scoped_to_a_group(operator, site_queue):
    a, b = two_groups(site_queue)
    listing = operator.get(reverse("delayq:api_messages", args=["orders", "billing", "dead"])).json()
    assert listing["group"] == "billing" and {m["id"] for m in listing["messages"]} == {a, b}
    assert operator.get(reverse("delayq:api_messages", args=["orders", "dead"])).json()["messages"] == []
    replayed = operator.post(reverse("delayq:api_replay", args=["orders", "billing"]), {"ids": [a]},
                             content_type="application/json").json()
    assert replayed == {"group": "billing", "replayed": 1, "skipped": 0}
    assert AuditEntry.objects.get(action="message.replay").group == "billing"
    topics = operator.get(reverse("delayq:api_topics")).json()["topics"]
    groups = {g["name"]: g["counts"] for g in topics[0]["groups"]}
    assert groups["billing"]["dead"] == 1 and groups["default"]["dead"] == 0
    gone = operator.get(reverse("delayq:api_messages", args=["orders", "nosuch", "dead"]))
    assert gone.status_code == 404 and "its groups are default, billing" in gone.json()["error"]


def test_the_overview_sums_groups_and_expands_to_one_row_per_group(viewer, site_queue):
    two_groups(site_queue)
    site_queue.pause("orders", "billing")
    site_queue.configure_topic("parts", partitions=4)
    site_queue.configure_group("parts", "ship", ordered=True)
    html = viewer.get(reverse("delayq:overview")).content.decode()
    assert state_counts(html, "orders") == {"pending": 0, "ready": 4, "unacked": 0, "retrying": 0, "dead": 2}
    assert "1 of 2 paused" in html and 'class="group-row"' not in html
    parts = re.search(r'<tr data-topic="parts" class="topic-row">(.*?)</th>', html, re.S).group(1)
    assert ">ordered: ship</span>" in parts and ">4 partitions</span>" in parts
    toggle = re.search(r'<a class="toggle" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    opened = viewer.get(reverse("delayq:overview") + toggle).content.decode()
    assert state_counts(opened, "orders", "billing") == {"pending": 0, "ready": 1, "unacked": 0, "retrying": 0,
                                                          "dead": 2}
    assert state_counts(opened, "orders", "default")["ready"] == 3
    assert 'href="/topics/orders/billing/dead/"' in opened
    # The htmx poll keeps the open rows.
    poll = re.search(r'<section id="summary" data-live="([^"]+)"', opened).group(1).replace("&amp;", "&")
    assert "open=orders" in poll


def test_sync_check_covers_groups_and_partitions(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p", jitter=0)
    with django_capture_on_commit_callbacks(execute=True):
        topic = Topic.objects.create(name="orders", retry_policy=policy, partitions=2)
        ConsumerGroup.objects.create(topic=topic, name="billing", retry_policy=policy, visibility_timeout=90)
    assert site_queue.layout("orders", fresh=True).partitions == 2
    assert site_queue.group_config("orders", "billing").visibility_timeout == 90
    call_command("dq_sync_topics", "--check")                       # in sync
    site_queue.configure_group("orders", "billing", visibility_timeout=5)  # changed behind the admin's back
    with pytest.raises(CommandError, match="differ"):
        call_command("dq_sync_topics", "--check")
    call_command("dq_sync_topics")
    assert site_queue.group_config("orders", "billing").visibility_timeout == 90
    site_queue.delete_group("orders", "billing")
    with pytest.raises(CommandError, match="differ"):
        call_command("dq_sync_topics", "--check")
    call_command("dq_sync_topics")
    assert site_queue.groups("orders") == ["default", "billing"]
    # A partition change on a topic that holds messages is refused by the engine and recorded.
    site_queue.publish("orders", "x")
    topic.partitions = 4
    with django_capture_on_commit_callbacks(execute=True):
        topic.save()
    topic.refresh_from_db()
    assert "partition count cannot change" in topic.sync_error
    assert site_queue.layout("orders", fresh=True).partitions == 2
    assert site_queue.counts("orders")[MessageState.ready] == 1


def test_reschedule_and_kill_act_on_one_group_and_are_audited(operator, viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(3600, max_attempts=5))
    site_queue.configure_group("orders", "billing", retry=EnginePolicy.fixed(3600, max_attempts=5))
    a, b = site_queue.publish_many("orders", ["a", "b"])
    for d in site_queue.claim("orders", 2, group="billing"):
        site_queue.nack(d, "gateway timeout")
    later = site_queue.publish("orders", "c", delay=3600)
    tab = reverse("delayq:message_action", args=["orders", "billing", "retrying"])
    # Viewers may not; a missing time is refused with a message, nothing moves.
    assert viewer.post(tab, {"action": "kill", "ids": [a]}).status_code == 403
    missing = operator.post(tab, {"action": "reschedule", "ids": [a]}, follow=True).content.decode()
    assert "Give the new due time (UTC) to reschedule messages." in missing
    too_far = operator.post(tab, {"action": "reschedule", "ids": [a], "reschedule_at": "2099-01-01T00:00:00"},
                            follow=True).content.decode()
    assert "Nothing was changed: that due time is further away than orders&#x27;s max_delay allows" in too_far
    when = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    response = operator.post(tab, {"action": "reschedule", "ids": [a],
                                   "reschedule_at": when.strftime("%Y-%m-%dT%H:%M:%S")}, follow=True)
    assert "Rescheduled 1 message of group billing." in response.content.decode()
    m = site_queue.get("orders", a, group="billing")
    assert m.state is MessageState.retrying and m.due_at == when
    refused, entry = AuditEntry.objects.filter(action="message.reschedule").order_by("id")
    assert (refused.result, refused.affected) == ("refused", 0)
    assert (entry.group, entry.scope["state"], entry.affected) == ("billing", "retrying", 1)
    killed = operator.post(tab, {"action": "kill", "ids": [a, b]}, follow=True).content.decode()
    assert "Killed 2 messages of group billing." in killed
    assert counts(site_queue, "orders", "billing") == {"pending": 1, "dead": 2}
    assert counts(site_queue, "orders", "default") == {"ready": 2, "pending": 1}
    assert AuditEntry.objects.get(action="message.kill").message_ids == [a, b]
    # The pending tab offers reschedule, not kill; compare-and-set on the tab's state.
    pending = operator.get(reverse("delayq:topic_state", args=["orders", "billing", "pending"])).content.decode()
    assert 'value="reschedule"' in pending and 'value="kill"' not in pending
    stale = operator.post(tab, {"action": "reschedule", "ids": [later], "reschedule_at": when.isoformat()},
                          follow=True).content.decode()
    assert "1 skipped because it was no longer retrying" in stale


def test_kill_all_and_reschedule_all_run_as_operations_on_one_group(operator, viewer, site_queue, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    from dashboard.tasks import run_bulk_operation

    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(3600, max_attempts=5))
    site_queue.configure_group("orders", "billing", retry=EnginePolicy.fixed(3600, max_attempts=5))
    site_queue.publish_many("orders", [str(i) for i in range(250)])
    for d in site_queue.claim("orders", 250, group="billing"):
        site_queue.nack(d, "gateway timeout")
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    kill_url = reverse("delayq:bulk_state", args=["orders", "billing", "retrying", "kill"])
    assert viewer.get(kill_url).status_code == 403
    assert Client().get(kill_url).status_code == 302                       # anonymous: to the login page
    preview = operator.get(kill_url).content.decode()
    assert "Kill 250 retrying messages of group billing in orders" in preview
    token = re.search(r'name="scope" value="([^"]+)"', preview).group(1)
    # The kill token does not confirm a reschedule, nor another group's kill.
    resched_url = reverse("delayq:bulk_state", args=["orders", "billing", "retrying", "reschedule"])
    assert operator.post(resched_url, {"scope": token}).status_code == 400
    other = reverse("delayq:bulk_state", args=["orders", "default", "retrying", "kill"])
    assert operator.post(other, {"scope": token}).status_code == 400
    late = site_queue.publish("orders", "late")            # arrives after the preview
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(kill_url, {"scope": token})
    op = BulkOperation.objects.get()
    assert (op.action, op.group, op.total, queued) == ("kill", "billing", 250, [op.pk])
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 250
    assert counts(site_queue, "orders", "billing") == {"dead": 250, "ready": 1}
    assert counts(site_queue, "orders", "default")["ready"] == 251
    assert site_queue.get("orders", late, group="billing").state is MessageState.ready

    # Reschedule all of the default group's ready? Not offered: pending and retrying only.
    bad = operator.get(reverse("delayq:bulk_state", args=["orders", "default", "ready", "reschedule"]))
    assert bad.status_code == 400
    for d in site_queue.claim("orders", 10):
        site_queue.nack(d, "e")
    when = (datetime.now(UTC) + timedelta(hours=5)).replace(microsecond=0)
    pending_url = reverse("delayq:bulk_state", args=["orders", "default", "retrying", "reschedule"])
    preview = operator.get(pending_url + "?reschedule_at=" + when.strftime("%Y-%m-%dT%H:%M:%S")).content.decode()
    assert "Reschedule 10 retrying messages of group default in orders" in preview
    token = re.search(r'name="scope" value="([^"]+)"', preview).group(1)
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(pending_url, {"scope": token})
    op = BulkOperation.objects.get(action="reschedule")
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 10
    retrying = site_queue.page("orders", "retrying", limit=20).messages
    assert len(retrying) == 10 and {m.due_at for m in retrying} == {when}
    assert AuditEntry.objects.filter(action="reschedule_operation.done", group="default").exists()
    page = operator.get(reverse("delayq:operation", args=[op.pk])).content.decode()
    assert "Rescheduled" in page and "to be due at" in page
