"""Personal API tokens and the JSON API's publish endpoint, against the session's real Redis."""

import base64
import html
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from dashboard.models import ApiToken, AuditEntry


def _create_form(persona, **fields):
    """POST the tokens page's form as a browser does: with the one-time nonce of the page."""
    nonce = persona.get(reverse("delayq:tokens")).context["nonce"]
    return persona.post(reverse("delayq:tokens"), {"nonce": nonce, **fields})


def _token_for(persona, name="producer", **fields) -> str:
    page = _create_form(persona, name=name, **fields)
    assert page.status_code == 201 and page["Cache-Control"] == "no-store"
    secret = page.context["secret"]
    assert secret.startswith("dq_") and secret in page.content.decode()
    return secret


def _publish(secret, topic, body, **extra):
    client = Client(enforce_csrf_checks=True)      # a script: no session, no CSRF token
    return client.post(reverse("delayq:api_publish", args=[topic]), json.dumps(body), content_type="application/json",
                       headers={"Authorization": f"Bearer {secret}"}, **extra)


def test_a_token_is_shown_once_stored_hashed_and_listed(operator):
    secret = _token_for(operator)
    token = ApiToken.objects.get(user=operator.user)
    assert token.digest == ApiToken.digest_of(secret) and secret not in (token.digest, token.prefix)
    assert secret.startswith(token.prefix)
    again = operator.get(reverse("delayq:tokens")).content.decode()
    assert secret not in again and token.prefix in again and "never" in again     # never used yet
    assert AuditEntry.objects.filter(action="token.create", username="operator").exists()


def test_a_token_publishes_without_csrf_and_the_use_is_recorded(operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(operator, "billing producer")
    done = _publish(secret, "orders", {"payload": {"order": 7}, "delay": 30, "key": "order-7",
                                       "headers": {"source": "php"}})
    assert done.status_code == 201, done.content
    answer = done.json()
    assert answer["published"] == 1 and answer["failed"] == 0 and answer["id"]
    message = site_queue.get("orders", answer["id"])
    assert json.loads(message.payload) == {"order": 7} and message.state == "pending"
    assert message.key == "order-7" and message.headers == {"source": "php"}
    token = ApiToken.objects.get(user=operator.user)
    assert token.last_used is not None
    entry = AuditEntry.objects.get(action="message.publish")
    assert entry.username == "operator" and entry.scope["via"] == "api token" and "billing producer" in entry.scope["token"]
    assert entry.message_ids == [answer["id"]]
    # The same key again is the same message (a producer's retry is safe).
    assert _publish(secret, "orders", {"payload": {"order": 7}, "key": "order-7"}).json()["id"] == answer["id"]


def test_revoked_expired_unknown_and_malformed_tokens_are_refused(operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(operator)
    token = ApiToken.objects.get(user=operator.user)
    revoke = operator.post(reverse("delayq:token_revoke", args=[token.pk]))
    assert revoke.status_code == 302
    refused = _publish(secret, "orders", {"payload": "x"})
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]
    other = _token_for(operator, "short-lived")
    ApiToken.objects.filter(name="short-lived").update(expires=timezone.now() - timedelta(seconds=1))
    assert _publish(other, "orders", {"payload": "x"}).status_code == 401
    assert _publish("dq_not-a-token", "orders", {"payload": "x"}).status_code == 401
    empty = Client().get(reverse("delayq:api_topics"), headers={"Authorization": "Bearer "})
    assert empty.status_code == 401 and "Bearer" in empty.json()["error"]
    # Another scheme (a proxy's Basic auth in front of the site) is left to the session.
    anonymous = Client().get(reverse("delayq:api_topics"), headers={"Authorization": "Basic b3A6cHc="})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "log in first"
    assert operator.get(reverse("delayq:api_topics"), headers={"Authorization": "Basic b3A6cHc="}).status_code == 200
    assert site_queue.counts("orders")["pending"] + site_queue.counts("orders")["ready"] == 0


def test_a_token_carries_its_owners_permissions_only(viewer, operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(viewer)
    reads = Client().get(reverse("delayq:api_topics"), headers={"Authorization": f"Bearer {secret}"})
    assert reads.status_code == 200                      # view_queue: the viewer may read
    refused = _publish(secret, "orders", {"payload": "x"})
    assert refused.status_code == 403 and "publish_message" in refused.json()["error"]
    # Someone else's token cannot be revoked through the page.
    theirs = ApiToken.objects.get(user=viewer.user)
    assert operator.post(reverse("delayq:token_revoke", args=[theirs.pk])).status_code == 404
    assert ApiToken.objects.get(pk=theirs.pk).revoked is None


def test_session_requests_still_need_the_csrf_token(operator, site_queue):
    site_queue.configure_topic("orders")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator.user)
    url = reverse("delayq:api_publish", args=["orders"])
    refused = strict.post(url, json.dumps({"payload": "x"}), content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]
    strict.get(reverse("delayq:overview"))
    accepted = strict.post(url, json.dumps({"payload": "x"}), content_type="application/json",
                           headers={"X-CSRFToken": strict.cookies["csrftoken"].value})
    assert accepted.status_code == 201
    assert AuditEntry.objects.get(action="message.publish").scope == {"via": "api"}


def test_the_answer_says_what_a_dedup_window_did_and_a_bad_window_is_a_400(operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(operator)
    body = {"payload": 1, "key": "k", "dedup": "debounce", "delay": 60}
    first = _publish(secret, "orders", body).json()
    again = _publish(secret, "orders", {**body, "payload": 2}).json()
    assert (first["outcome"], again["outcome"], again["id"]) == ("published", "debounced", first["id"])
    # published counts new messages only; accepted every one answered with an id (it counted both)
    assert (first["published"], first["accepted"], again["published"], again["accepted"]) == (1, 1, 0, 1)
    assert json.loads(site_queue.get("orders", first["id"]).payload) == 2
    throttle = {"payload": 1, "key": "t", "dedup": "throttle", "window": 30}
    assert _publish(secret, "orders", throttle).json()["outcome"] == "published"
    assert _publish(secret, "orders", throttle).json()["outcome"] == "throttled"
    for bad, says in ((dict(throttle, window=-1), "window must be a number of seconds"),
                      (dict(throttle, window=None), "needs window="),
                      (dict(throttle, dedup="sometimes"), "dedup must be one of")):
        refused = _publish(secret, "orders", bad)
        assert refused.status_code == 400 and says in refused.json()["error"], refused.content
    assert site_queue.counts("orders")["pending"] == 1 and site_queue.counts("orders")["ready"] == 1


def test_a_batch_reports_each_message_and_publishes_the_good_ones(operator, site_queue):
    site_queue.configure_topic("orders", max_payload_bytes=100)
    secret = _token_for(operator)
    at = (timezone.now() + timedelta(hours=1)).isoformat()
    done = _publish(secret, "orders", {"messages": [
        {"payload": "plain text"},
        {"payload": "x" * 200},                                   # over the topic's cap
        {"payload_base64": base64.b64encode(b"\x00\x01").decode(), "at": at},
        {"payload": 1, "delay": -5},                              # bad delay
        {"payload": 1, "colour": "red"},                          # unknown field
        {"payload": 1, "at": "2026-11-23T18:00:00"},              # no offset
        {"payload": 1, "delay": None, "at": at},                  # a null field is an absent one
        {"payload": 1, "delay": 5, "at": at},                     # both
    ]})
    assert done.status_code == 207, done.content
    answer = done.json()
    assert answer["published"] == 3 and answer["failed"] == 5
    results = answer["results"]
    assert [("id" in r) for r in results] == [True, False, True, False, False, False, True, False]
    assert "not both" in results[7]["error"]
    assert "100" in results[1]["error"] and "delay" in results[3]["error"]
    assert "colour" in results[4]["error"] and "offset" in results[5]["error"]
    assert site_queue.get("orders", results[0]["id"]).payload == b"plain text"
    binary = site_queue.get("orders", results[2]["id"])
    assert binary.payload == b"\x00\x01" and binary.state == "pending"
    entry = AuditEntry.objects.get(action="message.publish")
    assert entry.result == "partial" and entry.requested == 8 and entry.affected == 3
    none = _publish(secret, "orders", {"messages": [{"payload": 1, "delay": "soon"}]})
    assert none.status_code == 400 and none.json()["published"] == 0


def test_size_limits_and_bad_bodies_are_json_errors(operator, site_queue, settings):
    site_queue.configure_topic("orders")
    secret = _token_for(operator)
    settings.DELAYQ_API_MAX_BODY_BYTES = 1_000
    big = _publish(secret, "orders", {"payload": "x" * 2_000})
    assert big.status_code == 413 and "DELAYQ_API_MAX_BODY_BYTES" in big.json()["error"]
    client = Client()
    auth = {"Authorization": f"Bearer {secret}"}
    url = reverse("delayq:api_publish", args=["orders"])
    not_json = client.post(url, b"{nope", content_type="application/json", headers=auth)
    assert not_json.status_code == 400 and "not JSON" in not_json.json()["error"]
    too_many = client.post(url, json.dumps({"messages": [{"payload": 1}] * 501}), content_type="application/json",
                           headers=auth)
    assert too_many.status_code in (400, 413)
    settings.DELAYQ_API_MAX_BODY_BYTES = 1_000_000
    too_many = client.post(url, json.dumps({"messages": [{"payload": 1}] * 501}), content_type="application/json",
                           headers=auth)
    assert too_many.status_code == 400 and "1 to 500" in too_many.json()["error"]
    unknown = _publish(secret, "nosuchtopic", {"payload": 1})
    assert unknown.status_code == 404 and "create it first" in unknown.json()["error"]
    assert site_queue.counts("orders")["pending"] + site_queue.counts("orders")["ready"] == 0


@pytest.mark.parametrize("fields, status", [({"days": ""}, 201), ({"days": "30"}, 201), ({"days": "0"}, 400),
                                            ({"days": "x"}, 400), ({"access": "read"}, 201),
                                            ({"access": "root"}, 400), ({"topics": "orders, billing"}, 201),
                                            ({"topics": "no/slash"}, 400)])
def test_the_token_form_checks_its_input(operator, fields, status):
    page = _create_form(operator, name="n", **fields)
    assert page.status_code == status
    assert ApiToken.objects.filter(user=operator.user).count() == (1 if status == 201 else 0)


def test_an_administrator_revokes_anyones_token_in_the_admin(admin_user, operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(operator)
    token = ApiToken.objects.get(user=operator.user)
    changelist = reverse("admin:delayq_apitoken_changelist")
    done = admin_user.post(changelist, {"action": "revoke_selected", "_selected_action": [token.pk]})
    assert done.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).state == "revoked"
    assert _publish(secret, "orders", {"payload": "x"}).status_code == 401
    entry = AuditEntry.objects.get(action="token.revoke")
    assert entry.username == "boss" and entry.scope["owner"] == "operator"
    # Revoking again changes nothing and records nothing.
    admin_user.post(changelist, {"action": "revoke_selected", "_selected_action": [token.pk]})
    assert AuditEntry.objects.filter(action="token.revoke").count() == 1


def test_finding_tokens_page_leaves_the_newcomer_to_the_readme(operator, site_queue):
    """The page shows ready curl lines for this site's API (its own address), with the new token
    in them once made, each with a copy button; the line's address answers that token."""
    site_queue.configure_topic("orders")
    page = html.unescape(operator.get(reverse("delayq:tokens")).content.decode())
    assert 'curl -H "Authorization: Bearer $DELAYQ_TOKEN" http://testserver/api/topics/' in page
    assert "http://testserver/api/topics/TOPIC/messages/" in page
    assert 'data-copy="curl-list"' in page and "delayq/copy.js" in page
    created = _create_form(operator, name="shell")
    line = created.context["curl"]["list"]
    secret = created.context["secret"]
    assert f"Bearer {secret}" in line and line in html.unescape(created.content.decode())
    url = line.split()[-1]
    answer = Client().get(url.removeprefix("http://testserver"), headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200 and [t["name"] for t in answer.json()["topics"]] == ["orders"]
    publish_line = created.context["curl"]["publish"]
    body = publish_line.split("-d '")[1].split("'")[0]
    done = _publish(secret, "orders", json.loads(body))
    assert done.status_code == 201, done.content


def test_the_copy_script_is_served_from_the_app(operator):
    from pathlib import Path

    from django.contrib.staticfiles import finders

    script = finders.find("delayq/copy.js")
    assert script and "navigator.clipboard" in Path(script).read_text()


def test_finding_revoke_does_not_ask_first(operator, site_queue):
    """Revoke is a link to a question (asked with or without JavaScript); only its POST revokes."""
    _token_for(operator, "billing producer")
    token = ApiToken.objects.get(user=operator.user)
    url = reverse("delayq:token_revoke", args=[token.pk])
    listing = operator.get(reverse("delayq:tokens")).content.decode()
    assert f'href="{url}"' in listing and f'action="{url}"' not in listing
    question = operator.get(url)
    html = question.content.decode()
    assert question.status_code == 200 and "Revoke the API token billing producer?" in html
    assert f'<form method="post" action="{url}"' in html
    token.refresh_from_db()
    assert token.revoked is None and not AuditEntry.objects.filter(action="token.revoke").exists()
    assert operator.post(url).status_code == 302
    token.refresh_from_db()
    assert token.revoked is not None
    assert "revoked already" in operator.get(url).content.decode()


def test_finding_audit_page_hides_via_token(operator, site_queue):
    """An action taken with a token says which token on the audit page, not only in the admin."""
    site_queue.configure_topic("orders")
    secret = _token_for(operator, "billing producer", access="publish")
    assert _publish(secret, "orders", {"payload": 1}).status_code == 201
    token = ApiToken.objects.get(user=operator.user)
    page = operator.get(reverse("delayq:audit"), {"action": "message.publish"}).content.decode()
    assert (f'data-testid="via">via api token billing producer ({token.prefix}…) ({token.scope_words})</small>'
            in page)
    # An entry made in the console names no token.
    listed = operator.get(reverse("delayq:audit"), {"action": "token.create"}).content.decode()
    assert 'data-testid="via"' not in listed


def _api(secret, method, url, body=None):
    client = Client(enforce_csrf_checks=True)
    headers = {"Authorization": f"Bearer {secret}"}
    if method == "GET":
        return client.get(url, headers=headers)
    return client.post(url, json.dumps(body), content_type="application/json", headers=headers)


def test_finding_token_scope_read_only_publish_only_and_topics(operator, site_queue):
    for topic in ("orders", "billing", "mail"):
        site_queue.configure_topic(topic)
    reader = _token_for(operator, "dashboards", access="read")
    producer = _token_for(operator, "shop", access="publish", topics="orders billing")
    limited = _token_for(operator, "billing tool", topics="billing")
    replay = reverse("delayq:api_replay", args=["orders"])
    # Read-only: every GET, no POST.
    assert _api(reader, "GET", reverse("delayq:api_topics")).status_code == 200
    assert _api(reader, "GET", reverse("delayq:api_messages", args=["mail", "ready"])).status_code == 200
    for url in (reverse("delayq:api_publish", args=["orders"]), replay):
        refused = _api(reader, "POST", url, {"payload": 1, "ids": ["x"]})
        assert refused.status_code == 403 and "read-only" in refused.json()["error"]
    # Publish-only: publishing to its topics, nothing else.
    assert _api(producer, "POST", reverse("delayq:api_publish", args=["billing"]), {"payload": 1}).status_code == 201
    for method, url in (("GET", reverse("delayq:api_topics")), ("POST", replay),
                        ("GET", reverse("delayq:api_messages", args=["orders", "ready"]))):
        refused = _api(producer, method, url, {"ids": ["x"]})
        assert refused.status_code == 403 and "may only publish" in refused.json()["error"]
    other = _api(producer, "POST", reverse("delayq:api_publish", args=["mail"]), {"payload": 1})
    assert other.status_code == 403 and "limited to the topics orders, billing" in other.json()["error"]
    # Topic-limited: 403 elsewhere, and the topics list shows only its topics.
    listed = _api(limited, "GET", reverse("delayq:api_topics")).json()["topics"]
    assert [t["name"] for t in listed] == ["billing"]
    assert _api(limited, "GET", reverse("delayq:api_messages", args=["orders", "ready"])).status_code == 403
    assert _api(limited, "POST", replay, {"ids": ["x"]}).status_code == 403
    assert _api(limited, "POST", reverse("delayq:api_replay", args=["billing"]), {"ids": ["x"]}).status_code == 200
    assert site_queue.counts("mail")["ready"] == 0 and site_queue.counts("orders")["ready"] == 0
    # Shown on the page and in the audit of what was done with it.
    page = operator.get(reverse("delayq:tokens")).content.decode()
    assert "publish only; topics orders, billing" in page and "read only; every topic" in page
    published = AuditEntry.objects.get(action="message.publish")
    assert published.scope["token_scope"] == "publish only; topics orders, billing"
    created = AuditEntry.objects.filter(action="token.create").order_by("id").last()
    assert created.scope["token_scope"] == "the owner's permissions; topics billing"


def test_finding_token_outlives_password_change(operator, site_queue):
    site_queue.configure_topic("orders")
    secret = _token_for(operator)
    topics = reverse("delayq:api_topics")
    assert _api(secret, "GET", topics).status_code == 200
    user = operator.user
    user.set_password("a whole new password")
    user.save()
    refused = _api(secret, "GET", topics)
    assert refused.status_code == 401 and "changed their password" in refused.json()["error"]
    operator.force_login(user)
    assert "ended: password changed" in operator.get(reverse("delayq:tokens")).content.decode()
    # A token made after the change works.
    assert _api(_token_for(operator, "new"), "GET", topics).status_code == 200


def test_finding_token_outlives_deactivated_owner(operator, site_queue):
    secret = _token_for(operator)
    topics = reverse("delayq:api_topics")
    assert _api(secret, "GET", topics).status_code == 200
    type(operator.user).objects.filter(pk=operator.user.pk).update(is_active=False)
    assert _api(secret, "GET", topics).status_code == 401
    type(operator.user).objects.filter(pk=operator.user.pk).update(is_active=True)
    assert _api(secret, "GET", topics).status_code == 200      # the password did not change


def test_finding_token_secret_never_kept_in_the_session(operator):
    created = _create_form(operator, name="ci")
    secret = created.context["secret"]
    assert created.status_code == 201 and created["Cache-Control"] == "no-store"
    assert all(secret not in str(value) for value in operator.session.values())
    # The form sent again (a reload of the answer, the back button) creates no second token.
    again = operator.post(reverse("delayq:tokens"), {"name": "ci", "nonce": created.context["nonce"] + "x"})
    assert again.status_code == 409 and again.context["secret"] is None
    assert ApiToken.objects.filter(user=operator.user).count() == 1
    assert secret not in operator.get(reverse("delayq:tokens")).content.decode()


# serialized_rollback: its teardown then leaves the tables empty for the next transactional test (which
# reloads the same rows) instead of re-creating content types under new ids that collide with them.
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_finding_live_token_limit_races_concurrent_creation(operator):
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from django.db import connections

    from dashboard.tokens import MAX_LIVE_TOKENS

    ApiToken.objects.bulk_create([_unsaved(operator.user, n) for n in range(MAX_LIVE_TOKENS - 1)])
    threads = 6
    clients = []
    for _ in range(threads):            # each its own session and nonce, as six browser tabs
        client = Client()
        client.force_login(operator.user)
        clients.append((client, client.get(reverse("delayq:tokens")).context["nonce"]))
    start = Barrier(threads)

    def create(pair):
        client, nonce = pair
        try:
            start.wait()
            return client.post(reverse("delayq:tokens"), {"name": "race", "nonce": nonce}).status_code
        finally:
            connections.close_all()
    with ThreadPoolExecutor(threads) as pool:
        statuses = sorted(pool.map(create, clients))
    assert statuses == [201] + [400] * (threads - 1)
    assert ApiToken.objects.filter(user=operator.user, revoked__isnull=True).count() == MAX_LIVE_TOKENS


def _unsaved(user, n):
    token = ApiToken(user=user, name=f"t{n}")
    token.issue()
    return token
