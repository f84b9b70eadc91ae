"""Topic tabs, message detail, redaction, escaping, corrupt rows; each with and without htmx."""

import json

import pytest
from django.urls import reverse

from dashboard.models import AuditEntry, RetryPolicy, Topic
from queue_core import RetryPolicy as EnginePolicy

from .helpers import state_counts

pytestmark = pytest.mark.django_db


def kill(q, topic, payloads, error="boom"):
    q.configure_topic(topic, retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = q.publish_many(topic, payloads)
    for d in q.claim(topic, len(payloads)):
        q.nack(d, error)
    return ids


def test_it_shows_a_state_tab_with_counts(viewer, site_queue):
    kill(site_queue, "orders", ["a", "b"])
    site_queue.publish("orders", "later", delay=60)
    response = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"]))
    html = response.content.decode()
    assert response.status_code == 200 and "delayq/topic.html" in [t.name for t in response.templates]
    assert state_counts(html)["dead"] == 2 and state_counts(html)["pending"] == 1
    assert "Error groups" in html and "boom" in html
    assert "Replay selected" not in html  # a viewer sees no action buttons


def test_it_serves_regions_to_htmx(viewer, site_queue):
    kill(site_queue, "orders", ["a"])
    url = reverse("delayq:topic_state", args=["orders", "dead"])
    messages = viewer.get(url, headers={"HX-Request": "true"}).content.decode()
    assert messages.lstrip().startswith('<section id="messages"') and "<html" not in messages
    assert 'class="dead current"' in messages  # the tab bar travels with the region it belongs to
    counts = viewer.get(reverse("delayq:topic", args=["orders"]) + "?region=counts",
                        headers={"HX-Request": "true"}).content.decode()
    assert counts.lstrip().startswith('<section id="counts"') and state_counts(counts)["dead"] == 1


def test_it_paginates_with_a_cursor(viewer, site_queue):
    ids = site_queue.publish_many("orders", [str(i) for i in range(120)])
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    seen, query = [], ""
    for _ in range(5):
        response = viewer.get(url + query)
        page_ids = [i for i in ids if f'data-id="{i}"' in response.content.decode()]
        seen += page_ids
        cursor = response.context["next_cursor"]
        if not cursor:
            break
        query = f"?after={cursor}"
    assert seen == ids


def test_it_searches_by_id_and_by_key(viewer, site_queue):
    mid = site_queue.publish("orders", "x", key="order-42")
    site_queue.publish_many("orders", ["y"] * 5)
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    for q in (mid, "order-42"):
        rows = viewer.get(url, {"q": q}).context["rows"]
        assert [r["m"].id for r in rows] == [mid]


def test_it_filters_by_time_range_and_error_group(viewer, site_queue):
    kill(site_queue, "orders", ["a", "b"], error="db down")
    kill(site_queue, "orders", ["c"], error="bad input")
    group = next(g for g in site_queue.error_groups("orders") if g.sample_message == "db down")
    url = reverse("delayq:topic_state", args=["orders", "dead"])
    rows = viewer.get(url, {"fp": group.fingerprint}).context["rows"]
    assert sorted(r["payload"]["text"] for r in rows) == ["a", "b"]
    assert viewer.get(url, {"from": "2999-01-01T00:00:00"}).context["rows"] == []
    assert len(viewer.get(url, {"to": "2999-01-01T00:00:00"}).context["rows"]) == 3


def test_it_escapes_payloads_and_errors(viewer, site_queue):
    kill(site_queue, "orders", ['<script>alert("x")</script>'], error='<img src=x onerror="alert(1)">')
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<img src=x" not in html


def test_payloads_are_redacted_on_every_get_and_revealed_by_an_audited_post(viewer, admin_user, site_queue,
                                                                           django_capture_on_commit_callbacks):
    policy = RetryPolicy.objects.create(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="orders", retry_policy=policy, redaction_rules=["password", "card.number"])
    mid = site_queue.publish("orders", {"user": "ann", "password": "hunter2", "card": {"number": "4111"}})
    url = reverse("delayq:message", args=["orders", mid])
    download = reverse("delayq:message_payload", args=["orders", mid])
    reveal = reverse("delayq:message_reveal", args=["orders", mid])
    for client in (viewer, admin_user):     # a GET is redacted for everyone and writes nothing
        html = client.get(url).content.decode()
        assert "hunter2" not in html and "4111" not in html and "ann" in html and "Redacted" in html
        assert "hunter2" not in client.get(download).content.decode()
    assert not AuditEntry.objects.filter(action__startswith="payload.").exists()
    assert viewer.post(reveal).status_code == 403 and viewer.post(download).status_code == 403
    assert admin_user.get(reveal).status_code == 405
    revealed = admin_user.post(reveal).content.decode()
    assert "hunter2" in revealed and "recorded in the audit log" in revealed
    assert b"hunter2" in admin_user.post(download).content
    assert [e.action for e in AuditEntry.objects.filter(message_ids=[mid]).order_by("id")] == [
        "payload.reveal", "payload.download"]


def test_secrets_are_masked_in_errors_tracebacks_headers_and_history(viewer, site_queue):
    """Keys match case-insensitively and by site-wide fragment; a value masked in the payload is
    masked wherever it appears (the error a handler raised with it, its traceback); card numbers
    are masked by their shape."""
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(30, max_attempts=3))
    mid = site_queue.publish("orders", {"Password": "hunter2-long", "profile": {"API_TOKEN": "tok-123456"},
                                        "note": "card 4111 1111 1111 1111", "n": 1},
                             headers={"Authorization": "Bearer abcdef123", "trace": "t-1"})
    try:
        raise ValueError("login failed for password hunter2-long with tok-123456")
    except ValueError as exc:
        site_queue.nack(site_queue.claim("orders")[0], exc)
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    for secret in ("hunter2-long", "tok-123456", "4111 1111 1111 1111", "abcdef123"):
        assert secret not in html, secret
    assert "login failed for password ••••••" in html and "t-1" in html
    tab = viewer.get(reverse("delayq:topic_state", args=["orders", "retrying"])).content.decode()
    assert "hunter2-long" not in tab and "tok-123456" not in tab and "login failed" in tab
    api = viewer.get(reverse("delayq:api_messages", args=["orders", "retrying"])).json()["messages"][0]
    assert "hunter2" not in json.dumps(api) and api["last_error"]["message"].startswith("login failed")


def test_a_deeply_nested_payload_breaks_no_page(viewer, admin_user, site_queue):
    deep = ("[" * 5000 + "]" * 5000).encode()
    mid = site_queue.publish("orders", deep)
    mid2 = site_queue.publish("orders", '{"a":' * 100 + "1" + "}" * 100)
    for url in (reverse("delayq:topic_state", args=["orders", "ready"]), reverse("delayq:message", args=["orders", mid]),
                reverse("delayq:message", args=["orders", mid2]), reverse("delayq:api_messages", args=["orders", "ready"]),
                reverse("delayq:api_message", args=["orders", mid])):
        response = viewer.get(url)
        assert response.status_code == 200, url
    page = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert "nested deeper than 64 levels" in page
    assert admin_user.post(reverse("delayq:message_reveal", args=["orders", mid])).status_code == 200


def test_a_malformed_cursor_is_a_400_on_pages_and_the_api(viewer, site_queue):
    site_queue.publish("orders", "x")
    page = viewer.get(reverse("delayq:topic_state", args=["orders", "ready"]) + "?after=garbage")
    assert page.status_code == 400 and "malformed page cursor" in page.content.decode()
    api = viewer.get(reverse("delayq:api_messages", args=["orders", "ready"]) + "?after=garbage")
    assert api.status_code == 400 and "malformed page cursor" in api.json()["error"]
    dead = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"]) + "?fp=abc&after=zzz:1")
    assert dead.status_code == 400


def test_the_list_api_returns_previews_not_whole_payloads(viewer, site_queue):
    ids = site_queue.publish_many("orders", [{"blob": "x" * 200_000}] * 20)
    response = viewer.get(reverse("delayq:api_messages", args=["orders", "ready"]))
    assert len(response.content) < 50_000
    row = response.json()["messages"][0]
    assert row["payload_truncated"] and row["payload_size"] > 200_000 and len(row["payload_preview"]) <= 200
    one = viewer.get(reverse("delayq:api_message", args=["orders", ids[0]])).json()
    assert one["size"] == row["payload_size"] and len(one["payload"]) > 200_000


def test_it_truncates_large_payloads_with_a_download_link(viewer, site_queue):
    mid = site_queue.publish("orders", {"blob": "x" * 5000})
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "ready"])).content.decode()
    assert reverse("delayq:message_payload", args=["orders", "default", mid]) in html
    assert "x" * 1000 not in html


def test_message_detail_shows_attempts_history_and_error(viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(30, max_attempts=3))
    mid = site_queue.publish("orders", {"n": 1}, headers={"trace": "t-1"})
    try:
        raise ValueError("price missing")
    except ValueError as exc:
        site_queue.nack(site_queue.claim("orders")[0], exc)
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert "tried 1 time, up to 3 attempts" in html and "retry 30 s after the next failure" in html
    assert "price missing" in html and "Traceback" in html and "t-1" in html
    assert html.index("nacked") < html.index("published")  # newest first


def test_corrupt_messages_render_as_corrupt_rows(admin_user, site_queue):
    ids = kill(site_queue, "orders", ["a", "b"])
    site_queue.redis.hset(site_queue.keys("orders").info, ids[0], "{broken")
    response = admin_user.get(reverse("delayq:topic_state", args=["orders", "dead"]))
    html = response.content.decode()
    assert response.status_code == 200 and "corrupt" in html
    detail = admin_user.get(reverse("delayq:message", args=["orders", ids[0]]))
    assert detail.status_code == 200 and "cannot be delivered" in detail.content.decode()


def test_unknown_topic_and_state_are_404(viewer, site_queue):
    assert viewer.get(reverse("delayq:topic", args=["nope"])).status_code == 404
    site_queue.publish("orders", "x")
    assert viewer.get("/topics/orders/lost/").status_code == 404
    assert viewer.get("/topics/orders/default/lost/").status_code == 404
    missing = viewer.get(reverse("delayq:topic_state", args=["orders", "nogroup", "ready"]))
    assert missing.status_code == 404
    assert viewer.get(reverse("delayq:message", args=["orders", "NOPE"])).status_code == 404


def test_it_works_under_a_url_prefix(viewer, site_queue, settings):
    settings.ROOT_URLCONF = "tests.dashboard.prefixed_urls"
    site_queue.publish("orders", "x")
    html = viewer.get("/ops/queue/").content.decode()
    assert 'href="/ops/queue/topics/orders/"' in html


def test_a_large_payload_shows_its_first_64_kib_with_show_all_and_download(viewer, site_queue):
    big = {"blob": "x" * 1_000_000, "end": "THE-END"}
    site_queue.configure_topic("orders", max_payload_bytes=2_000_000)
    mid = site_queue.publish("orders", big)
    page = viewer.get(reverse("delayq:message", args=["orders", mid]))
    html = page.content.decode()
    assert len(html) < 120_000 and "THE-END" not in html
    assert 'data-testid="payload-clipped"' in html and '<a href="?all=1">Show all</a>' in html
    assert reverse("delayq:message_payload", args=["orders", "default", mid]) in html   # the download link
    whole = viewer.get(reverse("delayq:message", args=["orders", mid]) + "?all=1").content.decode()
    assert "THE-END" in whole and 'data-testid="payload-clipped"' not in whole
    small = site_queue.publish("orders", {"n": 1})
    assert 'payload-clipped' not in viewer.get(reverse("delayq:message", args=["orders", small])).content.decode()


def test_finding_topic_page_500s_for_the_celery_bridge_retry_policy(viewer, site_queue):
    # As the bridge configures it; read back from Redis the factor is a float (2.0 ** 19999 overflows).
    policy = EnginePolicy.exponential(base=1, factor=2, max_delay=60, max_attempts=20_000, jitter=0.1)
    site_queue.configure_topic("celery.celery", retry=policy)
    site_queue.configure_topic("extreme", retry=EnginePolicy.exponential(1, 1e300, max_delay=0,
                                                                        max_attempts=2 ** 31 - 1))
    for topic, attempts in (("celery.celery", "20,000"), ("extreme", "2,147,483,647")):
        msg_id = site_queue.publish(topic, "x")
        site_queue.nack(site_queue.claim(topic)[0], "boom")
        for url in (reverse("delayq:topic", args=[topic]),
                    reverse("delayq:topic_state", args=[topic, "default", "retrying"]),
                    reverse("delayq:message", args=[topic, "default", msg_id])):
            response = viewer.get(url)
            assert response.status_code == 200, url
        assert f"then dead after {attempts} attempts" in viewer.get(reverse("delayq:topic", args=[topic])).content.decode()


def test_a_chained_message_page_says_what_it_waits_for_and_a_debounce_is_in_its_history(viewer, site_queue):
    site_queue.configure_topic("orders")
    parent = site_queue.publish("orders", {"n": 1})
    child = site_queue.publish("orders", {"n": 2}, after=parent, delay=300)
    page = viewer.get(reverse("delayq:message", args=["orders", child]))
    assert page.status_code == 200
    html = page.content.decode()
    row = html.split('data-testid="waiting-for">', 1)[1].split("</td>", 1)[0]
    assert parent in row and reverse("delayq:message", args=["orders", "default", parent]) in row
    assert "5 min after group default acks it" in row
    api = viewer.get(reverse("delayq:api_message", args=["orders", child])).json()
    assert (api["state"], api["waiting_for"]) == ("pending", parent)
    tab = viewer.get(reverse("delayq:topic_state", args=["orders", "pending"]))
    assert tab.status_code == 200 and child in tab.content.decode()   # listed, with no due time
    mid = site_queue.publish("orders", {"n": 3}, key="k", dedup="debounce", delay=60)
    site_queue.publish("orders", {"n": 4}, key="k", dedup="debounce", delay=120)
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert "debounced" in html and "payload replaced; due 20" in html and " UTC (was 20" in html


def test_finding_error_group_samples_are_masked_like_message_errors(viewer, site_queue):
    """A new operator's walk: the dead tab's error groups showed the sample error text as the
    handler wrote it; a card number in it is masked as in the message rows and on the message page."""
    kill(site_queue, "orders", ["a"], error="charge refused for card 4111 1111 1111 1111")
    html = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    assert "4111 1111 1111 1111" not in html and html.count("charge refused for card ••••••") == 2


def _round_trips(client, url, monkeypatch) -> int:
    """Round trips to Redis (a pipeline is one) that one cold request of ``url`` makes."""
    from django.core.cache import cache
    from redis.connection import Connection

    sent = []
    real = Connection.send_packed_command

    def counted(self, command, check_health=True):
        sent.append(1)
        return real(self, command, check_health)
    cache.clear()                        # summaries are cached a second: count a cold page
    with monkeypatch.context() as m:
        m.setattr(Connection, "send_packed_command", counted)
        assert client.get(url).status_code == 200
    return len(sent)


def test_finding_held_rows_say_who_holds_them_without_a_read_per_row(viewer, site_queue, monkeypatch):
    site_queue.configure_group("orders", "default", ordered=True)
    first = [site_queue.publish("orders", "first", order_key="acct-a")]
    held = [site_queue.publish("orders", f"a{i}", order_key="acct-a") for i in range(3)]
    site_queue.claim("orders", 10)
    url = reverse("delayq:topic_state", args=["orders", "pending"])
    page = viewer.get(url).content.decode()
    message_url = reverse("delayq:message", args=["orders", "default", first[0]])
    assert page.count('data-testid="held-by"') == 3
    assert page.count(f'held by <a href="{message_url}"') == 3 and f"…{first[0][-8:]}</code>" in page
    few = _round_trips(viewer, url, monkeypatch)
    held += [site_queue.publish("orders", f"b{i}", order_key="acct-a") for i in range(40)]
    many = _round_trips(viewer, url, monkeypatch)
    assert 0 < many == few               # 43 held rows cost what 3 did: no read per row
    assert viewer.get(url).content.decode().count('data-testid="held-by"') == 43
