"""The header's find box (``find/?q=``) and ``api/find/?q=``: one message from anywhere by id, id
prefix or dedup key, or where it was last seen."""
import os

import pytest
from django.test import Client
from django.urls import reverse

from .test_api_tokens import _token_for

pytestmark = pytest.mark.django_db


def test_the_header_box_is_on_every_page(viewer, site_queue):
    for url in (reverse("delayq:overview"), reverse("delayq:workers"), reverse("delayq:operations")):
        html = viewer.get(url).content.decode()
        assert 'data-testid="find-box"' in html and f'action="{reverse("delayq:find")}"' in html


def test_it_goes_straight_to_a_message_held_in_one_place(viewer, site_queue):
    mid = site_queue.publish("refunds", {"n": 1}, key="order-1234")
    other = site_queue.publish("orders", {"n": 2})
    # Ids published in one millisecond differ only in their last characters (monotonic ULIDs):
    # the shortest prefix that names ``mid`` alone is one character past what the two share.
    unique_prefix = mid[:len(os.path.commonprefix([mid, other])) + 1]
    for text in (mid, mid.lower(), "order-1234", unique_prefix):
        response = viewer.get(reverse("delayq:find"), {"q": text})
        assert response.status_code == 302, text
        assert response["Location"] == reverse("delayq:message", args=["refunds", "default", mid])


def test_it_lists_every_group_holding_the_message(viewer, site_queue):
    site_queue.configure_group("orders", "billing")
    mid = site_queue.publish("orders", {"n": 1})
    site_queue.claim("orders", 1, group="billing")
    response = viewer.get(reverse("delayq:find"), {"q": mid})
    html = response.content.decode()
    assert response.status_code == 200 and 'data-testid="find-found"' in html
    assert reverse("delayq:message", args=["orders", "default", mid]) in html
    assert reverse("delayq:message", args=["orders", "billing", mid]) in html
    assert ">ready<" in html and ">unacked<" in html


def test_it_says_where_a_gone_message_was_last_seen(viewer, site_queue):
    mid = site_queue.publish("orders", "<script>x</script>")
    [d] = site_queue.claim("orders", 1)
    site_queue.ack(d)
    html = viewer.get(reverse("delayq:find"), {"q": mid}).content.decode()
    assert 'data-testid="find-seen"' in html and "acked" in html and "published" in html
    nothing = viewer.get(reverse("delayq:find"), {"q": "<b>no-such-key</b>"}).content.decode()
    assert 'data-testid="find-nothing"' in nothing and "<b>no-such-key</b>" not in nothing   # escaped


def test_the_api_answers_in_json(viewer, site_queue):
    site_queue.configure_group("orders", "billing")
    mid = site_queue.publish("orders", {"n": 1}, key="k-1")
    url = reverse("delayq:api_find")
    body = viewer.get(url, {"q": "k-1"}).json()
    assert body["complete"] and {(f["group"], f["state"], f["id"]) for f in body["found"]} == {
        ("default", "ready", mid), ("billing", "ready", mid)}
    assert body["found"][0]["url"].endswith(reverse("delayq:message", args=["orders", body["found"][0]["group"], mid]))
    [d] = site_queue.claim("orders", 1)
    site_queue.ack(d)
    body = viewer.get(url, {"q": mid}).json()
    assert [f["group"] for f in body["found"]] == ["billing"]
    assert [s["event"] for s in body["seen"]][:1] == ["acked"] and body["seen"][0]["group"] == "default"
    empty = viewer.get(url)
    assert empty.status_code == 400 and "id prefix or a dedup key" in empty.json()["error"]
    too_long = viewer.get(url, {"q": "x" * 301})
    assert too_long.status_code == 400 and "error" in too_long.json()


def test_find_needs_login_and_view_queue_and_keeps_to_a_tokens_topics(viewer, nobody, site_queue):
    mid = site_queue.publish("orders", {"n": 1}, key="shared")
    other = site_queue.publish("secret-topic", {"n": 2}, key="shared")
    assert Client().get(reverse("delayq:find"), {"q": mid}).status_code == 302
    assert nobody.get(reverse("delayq:find"), {"q": mid}).status_code == 403
    assert nobody.get(reverse("delayq:api_find"), {"q": mid}).status_code == 403
    secret = _token_for(viewer, access="read", topics="orders")
    body = Client().get(reverse("delayq:api_find"), {"q": "shared"}, headers={"Authorization": f"Bearer {secret}"}).json()
    assert [f["id"] for f in body["found"]] == [mid] and other not in str(body)
