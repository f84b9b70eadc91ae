"""Memory budgets in the console (issue 38 point 4): the Memory page in words (its share of
maxmemory and the time to full too), the budget set in the admin (audited, reaching the engine),
the API's 507 for a publish the budget refuses, and the "time to full under X" alert."""

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from dashboard import alerts, services
from dashboard.models import AlertRule, AuditEntry, RetryPolicy, Topic
from dashboard.services import sync
from dashboard.services.memory import MemoryView, percent_words, size_words
from queue_core import TopicMemory

from .test_api_tokens import _token_for
from .test_limits import save

pytestmark = pytest.mark.django_db


@pytest.fixture
def emails(site_queue, django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p", kind="exponential", jitter=0)
    with django_capture_on_commit_callbacks(execute=True):
        return Topic.objects.create(name="emails", retry_policy=policy)


@pytest.fixture
def publish_api(operator):
    auth = {"Authorization": f"Bearer {_token_for(operator)}"}
    url = reverse("delayq:api_publish", args=["emails"])
    return lambda body: Client().post(url, body, content_type="application/json", headers=auth)


def test_a_budget_set_in_the_admin_reaches_the_engine_audited(admin_user, emails, site_queue,
                                                              django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = save(admin_user, emails, max_messages="5", max_bytes="1000000")
    assert response.status_code == 302, response.content[:3000]
    cfg = site_queue.topic_config("emails")
    assert (cfg.max_messages, cfg.max_bytes) == (5, 1_000_000)
    entry = AuditEntry.objects.get(action="topic.change")
    assert entry.username == "boss" and entry.scope["changed"]["max_messages"] == "None -> 5"
    page = admin_user.get(reverse("admin:delayq_topic_change", args=[emails.pk])).content.decode()
    assert "Memory budget" in page and "each partition" in page.lower()
    with django_capture_on_commit_callbacks(execute=True):
        save(admin_user, emails, max_messages="", max_bytes="")   # blank: no budget
    assert site_queue.topic_config("emails").max_messages is None


def test_the_budget_and_other_topic_fields_reach_the_engine_together(admin_user, emails, site_queue,
                                                                     django_capture_on_commit_callbacks):
    """The row owns the budget beside its other fields: one save sets both."""
    with django_capture_on_commit_callbacks(execute=True):
        save(admin_user, emails, max_messages="7", dead_max_count="50")
    cfg = site_queue.topic_config("emails")
    assert (cfg.max_messages, cfg.dead_max_count) == (7, 50)


def test_a_zero_budget_is_refused_in_the_form(admin_user, emails):
    response = save(admin_user, emails, max_messages="0")
    assert response.status_code == 200 and "greater than or equal to 1" in response.content.decode()


def test_the_api_answers_507_naming_the_budget_and_publishes_nothing(publish_api, emails, site_queue):
    site_queue.configure_topic("emails", max_messages=2)
    assert publish_api('{"messages": [{"payload": 1}, {"payload": 2}]}').status_code == 201
    refused = publish_api('{"payload": 3}')
    assert refused.status_code == 507, refused.content
    body = refused.json()
    assert "max_messages budget is 2" in body["error"] and body["published"] == 0
    assert body["budget"] == {"budget": "max_messages", "limit": 2, "partition": 0, "share": 2, "used": 2,
                              "adding": 1}
    assert site_queue.counts("emails")["ready"] == 2
    entry = AuditEntry.objects.filter(action="message.publish").latest("pk")
    assert entry.result == "failed" and "max_messages budget" in entry.detail
    site_queue.ack(site_queue.claim("emails")[0])
    mixed = publish_api('{"messages": [{"payload": 4}, {"payload": 5}]}')   # one fits, one does not
    assert mixed.status_code == 207 and [("id" in r, "budget" in r) for r in mixed.json()["results"]] == [
        (True, False), (False, True)]


def test_the_publish_form_says_the_topic_is_full_with_507(operator, emails, site_queue):
    site_queue.configure_topic("emails", max_messages=1)
    site_queue.publish("emails", "first")
    response = operator.post(reverse("delayq:publish", args=["emails"]), {"payload": '{"n": 2}'})
    assert response.status_code == 507 and "is full" in response.content.decode()
    assert site_queue.counts("emails")["ready"] == 1


def test_the_memory_page_says_it_in_words(viewer, emails, site_queue):
    site_queue.configure_topic("emails", max_messages=1000)
    site_queue.publish_many("emails", ["x" * 100] * 40, delay=600)
    response = viewer.get(reverse("delayq:memory", args=["emails"]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "40 messages take ~" in html and "do not grow per message" in html
    assert "Budget: 1,000 messages (1,000 per partition; 40 stored)" in html
    topic_page = viewer.get(reverse("delayq:topic", args=["emails"])).content.decode()
    assert reverse("delayq:memory", args=["emails"]) in topic_page


def test_the_memory_page_needs_a_login():
    response = Client().get(reverse("delayq:memory", args=["emails"]))
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_time_to_full_alert_fires_under_its_threshold_and_not_when_not_growing(emails, site_queue, receiver,
                                                                                   settings):
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_HTTP = True
    settings.DELAYQ_ALERT_WEBHOOK_ALLOW_NETWORKS = ["127.0.0.1/32"]
    site_queue.configure_topic("emails", max_messages=1000)
    site_queue.publish_many("emails", ["x"] * 100, delay=600)
    minutes = site_queue.keys("emails").g.minutes
    site_queue.redis.delete(minutes)   # the rates are this test's to set (a minute may turn meanwhile)
    AlertRule.objects.create(topic=emails, kind=AlertRule.Kind.TIME_TO_FULL, threshold=3600,
                             webhook_url=receiver.url)
    assert services.health.measure("emails", "default", "time_to_full") is None   # no growth: no time to full
    assert alerts.evaluate() == []
    # 9,000 published in the last whole minute: 10/s over the 15 minutes the rate covers at least
    # (engine/memory.py MIN_RATE_MINUTES), so the budget's 900 free places last 90 s.
    sec, _ = site_queue.redis.time()
    site_queue.redis.hset(minutes, f"{int(sec) // 60 - 1}:published", 9000)
    site_queue.redis.hset(site_queue.keys("emails").g.stats, "published", 10 ** 6)   # history before the hour
    value = services.health.measure("emails", "default", "time_to_full")
    assert value == pytest.approx(900 / 10)
    fired = alerts.evaluate()
    assert [e.change for e in fired] == ["firing"]
    assert "time until Redis or the topic's budget is full" in fired[0].summary
    site_queue.redis.hset(minutes, f"{int(sec) // 60 - 1}:acked", 9000)
    assert [e.change for e in alerts.evaluate()] == ["resolved"]


def test_a_budget_set_from_python_on_a_managed_topic_is_drift_and_adoption_copies_it(emails, site_queue):
    """The row owns the budget, as it owns the dispatch limits: a budget set from Python is reported
    as drift until the row says the same; adopting a topic copies its budget."""
    site_queue.configure_topic("emails", max_messages=9)
    assert sync.drift(emails).differences["max_messages"] == (9, None)
    emails.max_messages = 9
    emails.save()
    assert "max_messages" not in sync.drift(emails).differences
    site_queue.configure_topic("invoices", max_bytes=5_000_000)
    adopted = sync.adopt("invoices")
    assert (adopted.max_messages, adopted.max_bytes) == (None, 5_000_000)


def test_finding_the_api_answers_507_only_when_the_budget_refused_every_message(publish_api, emails, site_queue):
    """Review #38p4 finding 6: a batch refused partly by the budget and partly for another reason
    answered 507, which says "the topic is full" of a request that was also wrong. It is 400 now,
    with each message's reason; 507 stays for a batch the budget alone refused."""
    site_queue.configure_topic("emails", max_messages=1)
    assert publish_api('{"payload": 1}').status_code == 201
    mixed = publish_api('{"messages": [{"payload": 2}, {"payload": 3, "priority": 99}]}')
    assert mixed.status_code == 400, mixed.content
    results = mixed.json()["results"]
    assert "budget" in results[0] and "budget" not in results[1] and "priority" in results[1]["error"]
    full = publish_api('{"messages": [{"payload": 4}, {"payload": 5}]}')
    assert full.status_code == 507 and all("budget" in r for r in full.json()["results"])


def test_finding_the_memory_page_shows_fixed_and_held_bytes(viewer, emails, site_queue):
    """The Memory page says what does not grow per message and what undo holds."""
    site_queue.publish_many("emails", ["x" * 100] * 5, delay=600)
    site_queue.purge("emails", "pending", hold="op-9")
    page = viewer.get(reverse("delayq:memory", args=["emails"]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "5 held for undo take" in text and "do not grow per message" in text


def test_finding_budget_badges_on_the_overview_and_the_topic_page(viewer, site_queue):
    site_queue.configure_topic("full", max_messages=3)
    site_queue.publish_many("full", ["x"] * 3, delay=600)
    site_queue.configure_topic("near", max_messages=25)
    site_queue.publish_many("near", ["x"] * 23, delay=600)        # 92 %
    site_queue.configure_topic("roomy", max_messages=100)
    site_queue.publish_many("roomy", ["x"] * 79, delay=600)       # under NEAR_FULL: nothing said
    site_queue.publish("unlimited", "x")
    overview = viewer.get(reverse("delayq:overview")).content.decode()
    badges = {row.split('"', 1)[0]: row for row in overview.split('data-topic="')[1:]}
    assert 'data-testid="budget"' in badges["full"] and ">budget full</a>" in badges["full"]
    assert ">92 % of budget</a>" in badges["near"] and reverse("delayq:memory", args=["near"]) in badges["near"]
    assert 'data-testid="budget"' not in badges["roomy"] + badges["unlimited"]
    full = viewer.get(reverse("delayq:topic_state", args=["full", "pending"])).content.decode()
    assert "Publishing to full is refused (TopicFull)" in full and ">budget full</a>" in full
    near = viewer.get(reverse("delayq:topic_state", args=["near", "pending"]), {"region": "counts"},
                      headers={"HX-Request": "true"}).content.decode()
    assert ">92 % of budget</a>" in near                          # the live counts region keeps it fresh
    roomy = viewer.get(reverse("delayq:topic_state", args=["roomy", "pending"])).content.decode()
    assert 'data-testid="budget"' not in roomy


def test_finding_the_memory_page_says_the_rate_window_and_spreads_a_burst(viewer, emails, site_queue):
    site_queue.configure_topic("emails", max_messages=100_000)
    site_queue.publish_many("emails", ["x"] * 10, delay=600)
    minutes = site_queue.keys("emails").g.minutes
    site_queue.redis.delete(minutes)
    sec, _ = site_queue.redis.time()
    site_queue.redis.hset(minutes, f"{int(sec) // 60 - 30}:published", 18_000)   # a burst, then 29 quiet minutes
    site_queue.redis.hset(site_queue.keys("emails").g.stats, "published", 10 ** 6)   # history before the hour
    html = viewer.get(reverse("delayq:memory", args=["emails"])).content.decode()
    assert "10.0/s published, 0.0/s acked over the last 30 minutes" in html   # 5 minutes read it 60/s at first
    assert "averaged over the last 30 whole minutes: the last 60, or since the topic's first counted minute" in html


def test_finding_a_young_topic_reads_its_pace_over_all_its_history(viewer, emails, site_queue):
    """Review 38w, 4: 1,200 published in a topic's first 2 whole minutes is 10/s, not 1.3/s over 15."""
    site_queue.configure_topic("emails", max_messages=100_000)
    g = site_queue.keys("emails").g
    site_queue.redis.delete(g.minutes)
    minute = int(site_queue.redis.time()[0]) // 60
    site_queue.redis.hset(g.minutes, mapping={f"{minute - 2}:published": 600, f"{minute - 1}:published": 600})
    site_queue.redis.hset(g.stats, "published", 1200)
    html = viewer.get(reverse("delayq:memory", args=["emails"])).content.decode()
    assert "10.0/s published, 0.0/s acked over the last 2 minutes, all the history there is" in html
    assert "averaged over the last 2 min, all the history there is" in html


def test_finding_a_partly_full_budget_says_in_how_many_partitions(viewer, site_queue):
    """Review 38w, 6: with one partition of four full, publishes routed to the others succeed: the
    badge and the topic page say "full in 1 of 4 partitions", not that publishing is refused."""
    site_queue.configure_topic("split", max_messages=8, partitions=4)    # a share of 2 each
    site_queue.publish_many("split", ["x"] * 2, delay=600, partition=0)
    overview = viewer.get(reverse("delayq:overview")).content.decode()
    row = overview.split('data-topic="split"', 1)[1].split("</tr>", 1)[0]
    assert ">budget full in 1 of 4 partitions</a>" in row
    page = viewer.get(reverse("delayq:topic_state", args=["split", "pending"])).content.decode()
    assert "The budget is full in 1 of 4 partitions: publishes routed there are refused (TopicFull)" in page
    assert "Publishing to split is refused" not in page
    site_queue.publish("split", "y", partition=1)                          # another partition takes it
    for p in (1, 2, 3):
        site_queue.publish_many("split", ["x"] * (1 if p == 1 else 2), delay=600, partition=p)
    page = viewer.get(reverse("delayq:topic_state", args=["split", "pending"])).content.decode()
    assert "Publishing to split is refused (TopicFull)" in page and ">budget full</a>" in page



@pytest.fixture
def server_limit(site_queue):
    """Sets the test Redis's maxmemory (and policy) for one test, restored afterwards: the server
    is the session's, shared by every test that runs after this one. Call it with the bytes (0: no
    limit); returns what was set."""
    r = site_queue.redis
    before = r.config_get("maxmemory*")

    def set_limit(limit: int) -> int:
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", limit)
        return int(r.config_get("maxmemory")["maxmemory"])

    try:
        yield set_limit
    finally:
        r.config_set("maxmemory", before["maxmemory"])
        r.config_set("maxmemory-policy", before["maxmemory-policy"])


def growing(q, topic, published, acked):
    """The topic's last whole minute says ``published`` and ``acked`` (as publish.lua and ack.lua
    count them): the rates are read from whole minutes only, so publishing in the test itself would
    count only after the minute turns. The lifetime count says the topic has history before the
    hour, so the rates are over 15 minutes (MIN_RATE_MINUTES)."""
    minutes = q.keys(topic).g.minutes
    q.redis.delete(minutes)
    minute = int(q.redis.time()[0]) // 60
    q.redis.hset(minutes, mapping={f"{minute - 1}:published": published, f"{minute - 1}:acked": acked})
    q.redis.hset(q.keys(topic).g.stats, "published", 10 ** 6)


UNITS = {"d": 86400, "h": 3600, "min": 60, "s": 1}


def said_seconds(text: str) -> float:
    """'4 h 39 min' (format_seconds) back to seconds."""
    return sum(int(n) * UNITS[u] for n, u in re.findall(r"(\d+) (d|h|min|s)\b", text))


def memory_page(client, topic="emails") -> str:
    response = client.get(reverse("delayq:memory", args=[topic]))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def test_it_says_the_share_of_maxmemory_and_the_time_to_full_in_words(viewer, emails, site_queue, server_limit):
    limit = server_limit(int(site_queue.redis.info("memory")["used_memory"]) + 64 * 1024 ** 2)
    site_queue.publish_many("emails", ["x" * 500] * 2000, delay=600)
    growing(site_queue, "emails", published=9000, acked=4500)   # 10/s published, 5/s acked over 15 minutes
    m = site_queue.memory("emails")
    page = memory_page(viewer)

    share = re.search(r"That is ([\d.]+) % of maxmemory \((.+?), policy noeviction\); Redis uses (.+?) in all "
                      r"\(([\d.]+) %\)\.", page)
    assert share, page
    assert float(share[1]) == pytest.approx(m.measured_bytes / limit * 100, rel=0.06)   # two significant digits
    assert 1 < float(share[1]) < 10   # ~2,000 x ~800 B of 64 MB: said as "2.4 %", never in exponent notation
    assert share[2] == size_words(limit)
    assert float(share[4]) == pytest.approx(m.used_memory / limit * 100, rel=0.2)

    growth = re.search(r"Growing by 5\.0 messages/s \(10\.0/s published, 5\.0/s acked over the last 15 minutes\): "
                       r"Redis is full in ~([\w ]+?) at this growth \(published minus acked; only this topic's "
                       r"growth is counted\)\.", page)
    assert growth, page
    # The room left under maxmemory over the net growth (5/s, not the 10/s published) in bytes.
    expected = (m.maxmemory - m.used_memory) / (5 * m.bytes_per_message)
    assert 3600 < said_seconds(growth[1]) == pytest.approx(expected, rel=0.02)
    table = page.split('data-testid="memory-table"', 1)[1]
    assert re.search(r"<th scope=\"row\">time to full</th><td>[\d.]+ h</td>", table)


def test_it_says_there_is_no_share_and_no_time_to_full_without_maxmemory(viewer, emails, site_queue, server_limit):
    server_limit(0)
    site_queue.publish_many("emails", ["x" * 100] * 50, delay=600)
    growing(site_queue, "emails", published=9000, acked=0)
    page = memory_page(viewer)
    assert "; no maxmemory is set, so there is no share and no time to full (set one in production)." in page
    assert ("Growing by 10.0 messages/s (10.0/s published, 0.0/s acked over the last 15 minutes): no time to full, "
            "as no maxmemory is set.") in page
    assert "% of maxmemory" not in page and "Redis is full in" not in page
    table = page.split('data-testid="memory-table"', 1)[1]
    assert '<th scope="row">maxmemory</th><td>not set</td>' in table
    assert '<th scope="row">time to full</th><td>—</td>' in table


def test_it_says_not_growing_and_why_no_time_to_full_without_messages(viewer, emails, site_queue, server_limit):
    server_limit(int(site_queue.redis.info("memory")["used_memory"]) + 64 * 1024 ** 2)
    site_queue.publish_many("emails", ["x" * 100] * 50, delay=600)
    growing(site_queue, "emails", published=4500, acked=4500)
    assert "Not growing (5.0/s published, 5.0/s acked over the last 15 minutes)." in memory_page(viewer)
    site_queue.purge("emails", "pending")                  # growing, but no message to measure one by
    growing(site_queue, "emails", published=900, acked=0)
    assert ("Growing by 1.0 messages/s (1.0/s published, 0.0/s acked over the last 15 minutes): no time to full "
            "yet: no message is stored to measure the bytes one takes.") in memory_page(viewer)


def measured(**fields) -> TopicMemory:
    base = dict(topic="t", partitions=1, messages=10, message_bytes=1000, fixed_bytes=0, keys_sampled=3,
                used_memory=0, maxmemory=0, maxmemory_policy="noeviction", publish_rate=0.0, ack_rate=0.0,
                max_messages=None, max_bytes=None, store_bytes=1000)
    return TopicMemory(**{**base, **fields})


@pytest.mark.parametrize(("topic_bytes", "used", "said"), [
    (1_000, 10 * 2 ** 20,
     "That is under 0.01 % of maxmemory (64.0 GB, policy noeviction); Redis uses 10.0 MB in all (0.015 %)."),
    (int(0.996 * 64 * 2 ** 30), int(0.999 * 64 * 2 ** 30),
     "That is 100 % of maxmemory (64.0 GB, policy noeviction); Redis uses 63.9 GB in all (100 %)."),
    (int(0.024 * 64 * 2 ** 30), 32 * 2 ** 30,
     "That is 2.4 % of maxmemory (64.0 GB, policy noeviction); Redis uses 32.0 GB in all (50 %)."),
])
def test_it_says_a_share_in_plain_percent_never_in_exponent_notation(topic_bytes, used, said):
    """'.2g' wrote a topic of 1 KB in 64 GB as "1.5e-06 %" and one at 99.6 % as "1e+02 %"."""
    view = MemoryView(measured(message_bytes=topic_bytes, used_memory=used, maxmemory=64 * 2 ** 30))
    assert view.share == said


def test_it_says_percentages_in_words():
    assert [percent_words(f) for f in (0, 0.00001, 0.0047, 0.024, 0.0996, 0.98, 1.5)] == [
        "0 %", "under 0.01 %", "0.47 %", "2.4 %", "10 %", "98 %", "150 %"]
