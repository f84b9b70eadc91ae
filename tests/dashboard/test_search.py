"""A state tab's query (``?q=``) and the same in the JSON API: bounded scans with an honest
continuation, clear 400s for malformed queries, and redaction that holds."""

import pytest
from django.urls import reverse

from dashboard.models import RetryPolicy, Topic
from queue_core import RetryPolicy as EnginePolicy

pytestmark = pytest.mark.django_db


def _ids_in(html, ids):
    return [i for i in ids if f'data-id="{i}"' in html]


def test_it_filters_a_tab_by_a_query_bookmarkably(viewer, site_queue):
    ids = site_queue.publish_many("orders", [{"customer": {"id": i % 3}, "note": "late fee" if i < 2 else "ok"}
                                             for i in range(9)], headers={"tenant": "acme"})
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    for query, want in {"payload.customer.id:1": ids[1::3], 'payload.note:"late fee"': ids[:2],
                        "payload.customer.id:1 header.tenant:acme": ids[1::3], "header.tenant:globex": []}.items():
        response = viewer.get(url, {"q": query})
        html = response.content.decode()
        assert response.status_code == 200 and _ids_in(html, ids) == want, query
        assert 'data-testid="scan-progress"' in html and f"Scanned 9 of 9 ready messages, {len(want)} match" in html
        assert "data-live=" not in html.split('id="messages"')[1].split(">")[0]   # a scan is not polled
    fragment = viewer.get(url, {"q": "payload.customer.id:2"}, headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<section id="messages"') and _ids_in(fragment, ids) == ids[2::3]


def test_a_query_continues_where_its_time_budget_ran_out(viewer, site_queue, monkeypatch):
    """With no time budget each page is one short scan; "continue" walks on to every match, and
    says honestly how much it scanned."""
    from dashboard.services import finding

    monkeypatch.setattr(finding, "SEARCH_BUDGET_S", 0)
    ids = site_queue.publish_many("orders", [{"n": i % 50} for i in range(600)])
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    params, found, pages = {"q": "payload.n:7"}, [], 0
    while True:
        response = viewer.get(url, params)
        pages += 1
        html = response.content.decode()
        found += _ids_in(html, ids)
        scan = response.context["scan"]
        assert f"Scanned {scan.scanned} of 600 ready messages, {scan.matched} match" in html
        if scan.done:
            assert "the whole tab" in html and 'data-testid="scan-continue"' not in html
            break
        assert 'data-testid="scan-continue"' in html and "so far" in html
        params = {"q": "payload.n:7", "after": response.context["next_cursor"]}
    assert pages > 1 and sorted(found) == sorted(ids[7::50]) and scan.scanned == 600


def test_malformed_queries_are_a_400_that_says_why(viewer, site_queue):
    site_queue.publish("orders", {"n": 1})
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    for query, says in (("paylod.n:1", "unknown field"), ('payload.note:"open', "unclosed quote"),
                        ("attempts>=many", "whole number"), ("two words", "has no field")):
        for headers in ({}, {"HX-Request": "true"}):
            response = viewer.get(url, {"q": query}, headers=headers)
            html = response.content.decode()
            assert response.status_code == 400 and says in html and "data-query-error" in html, query
            assert 'value="' in html and "Query syntax" in html     # the box keeps it; the syntax is there
        api = viewer.get(reverse("delayq:api_messages", args=["orders", "ready"]), {"q": query})
        assert api.status_code == 400 and says in api.json()["error"]


def test_a_single_word_still_finds_one_message_by_id_or_key(viewer, site_queue):
    a = site_queue.publish("orders", {"n": 1}, key="order-77")
    site_queue.publish("orders", {"n": 2})
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    for word in (a, "order-77"):
        response = viewer.get(url, {"q": word})
        assert response.status_code == 200 and response.context["scan"] is None
        assert [r["m"].id for r in response.context["rows"]] == [a]


def test_the_api_takes_the_same_query_and_reports_the_scan(viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = site_queue.publish_many("orders", [{"n": i} for i in range(4)])
    for d in site_queue.claim("orders", 4):
        site_queue.nack(d, TimeoutError("upstream") if d.message.json()["n"] % 2 else KeyError("sku"))
    url = reverse("delayq:api_messages", args=["orders", "dead"])
    body = viewer.get(url, {"q": "error:TimeoutError"}).json()
    assert sorted(m["id"] for m in body["messages"]) == sorted(ids[1::2])
    assert body["scan"] == {"scanned": 4, "total": 4, "matched": 2, "done": True} and body["next"] is None
    group_url = reverse("delayq:api_messages", args=["orders", "default", "dead"])
    assert viewer.get(group_url, {"q": "error:KeyError attempts:1"}).json()["scan"]["matched"] == 2
    assert "scan" not in viewer.get(url).json()


def test_a_redacted_field_is_not_searchable(viewer, admin_user, site_queue, django_capture_on_commit_callbacks):
    """payload.password:hunter2 finds nothing, for a Viewer and for anyone on a GET; nor does the
    secret leak through the error text, a header, or a card number; unredacted fields still match."""
    policy = RetryPolicy.objects.create(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="orders", retry_policy=policy, redaction_rules=["password", "card.number"])
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    mid = site_queue.publish("orders", {"user": "ann", "password": "hunter2", "card": {"number": "4111111111111111"},
                                        "pan": "4111111111111111"}, headers={"api_token": "s3cr3t-tok"})
    [d] = site_queue.claim("orders", 1)
    site_queue.nack(d, ValueError("login failed for hunter2"))
    tab = reverse("delayq:topic_state", args=["orders", "dead"])
    api = reverse("delayq:api_messages", args=["orders", "dead"])
    for client in (viewer, admin_user):
        for query in ("payload.password:hunter2", "payload.password:hunter*", "payload.card.number:4111*",
                      "payload.pan:4111111111111111", "error:hunter2", "header.api_token:s3cr3t-tok"):
            assert mid not in client.get(tab, {"q": query}).content.decode(), query
            assert client.get(api, {"q": query}).json()["messages"] == [], query
        assert mid in client.get(tab, {"q": "payload.user:ann error:login"}).content.decode()
    # the engine did find the raw match: only the redacted view turned it down
    assert [m.id for m in site_queue.search("orders", "dead", "payload.password:hunter2").messages] == [mid]


def test_query_needs_login_and_view_queue(nobody, client, site_queue):
    site_queue.publish("orders", {"n": 1})
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    assert client.get(url, {"q": "payload.n:1"}).status_code == 302
    assert nobody.get(url, {"q": "payload.n:1"}).status_code == 403
    assert nobody.get(reverse("delayq:api_messages", args=["orders", "ready"]), {"q": "payload.n:1"}).status_code == 403
