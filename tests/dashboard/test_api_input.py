"""The JSON API against hostile bodies: every malformed or oversized one is a 4xx JSON error that
says what was wrong, never a 500, and a big body costs a few times its size in memory. Against the
session's real Redis, through the test client, as a script with a token would send them."""

import json
import tracemalloc
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry
from queue_core import RetryPolicy as EnginePolicy

from .test_api_tokens import _token_for

MiB = 2**20


@pytest.fixture
def api(operator, site_queue):
    """(post, get) for the operator's token; ``orders`` exists."""
    site_queue.configure_topic("orders")
    auth = {"Authorization": f"Bearer {_token_for(operator)}"}
    client = Client()

    def post(url, body: bytes | str):
        return client.post(url, body, content_type="application/json", headers=auth)

    def get(url):
        return client.get(url, headers=auth)
    return post, get


PUBLISH = reverse("delayq:api_publish", args=["orders"])


def _one(post, body: bytes | str):
    """The answer to a one-message publish, which must be a JSON 400 naming the problem."""
    answer = post(PUBLISH, body)
    assert answer.status_code == 400 and answer["Content-Type"] == "application/json", answer.content[:300]
    return answer.json()["error"]


def test_finding_deeply_nested_json_is_400(api, site_queue):
    post, _ = api
    deep = b"[" * 100_000 + b"]" * 100_000
    for body in (deep, b'{"payload": ' + deep + b"}", b'{"messages": [{"payload": ' + deep + b"}]}"):
        answer = post(PUBLISH, body)
        assert answer.status_code == 400, answer.content[:300]
        assert "deeper than 128 levels" in answer.json()["error"] or "must be a JSON object" in answer.json()["error"]
    replayed = post(reverse("delayq:api_replay", args=["orders"]), b'{"ids": ' + deep + b"}")
    assert replayed.status_code == 400 and "deeper than 128" in replayed.json()["error"]
    # 128 levels are fine, and the payload arrives as sent.
    ok = post(PUBLISH, b'{"payload": ' + b"[" * 128 + b"]" * 128 + b"}")
    assert ok.status_code == 201
    assert site_queue.get("orders", ok.json()["id"]).payload == b"[" * 128 + b"]" * 128


@pytest.mark.parametrize("body, words", [
    ('{"payload": 1, "delay": Infinity}', "Infinity and NaN are not JSON"),
    ('{"payload": 1, "delay": -Infinity}', "Infinity and NaN are not JSON"),
    ('{"payload": 1, "ttl": NaN}', "Infinity and NaN are not JSON"),
    ('{"payload": NaN}', "Infinity and NaN are not JSON"),
    ('{"payload": 1, "delay": 1e308}', "delay must be at most 31,536,000,000 seconds (1,000 years)"),
    ('{"payload": 1, "delay": 1e400}', "delay must be at most 31,536,000,000 seconds"),
    ('{"payload": 1, "ttl": 1e308}', "ttl must be at most 31,536,000,000 seconds"),
    ('{"payload": 1, "ttl": 1e20}', "ttl must be at most 31,536,000,000 seconds"),
    ('{"payload": 1, "at": "9999-12-31T23:59:59-14:00"}', "at must be between 1970-01-01 and"),
    ('{"payload": 1, "at": "0001-01-01T00:00:00+14:00"}', "at must be between 1970-01-01 and"),
    ('{"payload": 1, "max_attempts": 1e400}', "max_attempts must be an integer from 1 to 1,000,000"),
    ('{"payload": 1, "partition": 99999999999999999999999}', "partition must be an integer from 0 to 1,000,000"),
])
def test_finding_infinite_nan_and_huge_delays_and_ttls_are_400(api, site_queue, body, words):
    post, _ = api
    assert words in _one(post, body)
    assert site_queue.counts("orders")["pending"] + site_queue.counts("orders")["ready"] == 0


def test_finding_the_longest_ttl_allowed_is_still_readable(api, site_queue):
    # A TTL of 1e20 s used to be accepted and stored as "1e+23" ms: the message could not be read back.
    post, get = api
    longest = 365 * 1000 * 86400
    done = post(PUBLISH, json.dumps({"payload": {"a": 1}, "ttl": longest}))
    assert done.status_code == 201
    message = site_queue.get("orders", done.json()["id"])
    assert message.ttl == longest and not message.corrupt and json.loads(message.payload) == {"a": 1}


@pytest.mark.parametrize("body, words", [
    (b"", "must be a JSON object"), (b"{nope", "not JSON"), (b'{"payload": 1', "ends too early"), (b'{"payload": 1,}', "not JSON"),
    (b'{"payload": [1,]}', "not JSON"), (b'{"payload": 1} trailing', "not JSON"), (b"[]", "must be a JSON object"),
    (b'{"payload": "\xff"}', "not UTF-8"), (b'{"payload": 01}', "not JSON"), (b'{"payload": 1, "colour": 2}', "colour"),
    (b'{"messages": []}', "1 to 500"), (b'{"messages": {}}', "1 to 500"),
    (b'{"messages": [{"payload": 1}], "payload": 2}', "not both"),
])
def test_finding_malformed_publish_bodies_are_400_json(api, body, words):
    post, _ = api
    answer = post(PUBLISH, body)
    assert answer.status_code == 400 and words in answer.json()["error"], answer.content[:300]


def test_finding_replay_body_over_the_limit_is_a_json_413(api, settings, site_queue):
    post, _ = api
    url = reverse("delayq:api_replay", args=["orders"])
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000           # Django's own limit no longer applies here
    big = post(url, json.dumps({"ids": ["x" * 30] * 500}))
    assert big.status_code == 200 and big.json()["skipped"] == 500     # read within the API's own limit
    settings.DELAYQ_API_MAX_BODY_BYTES = 1_000
    refused = post(url, json.dumps({"ids": ["x" * 30] * 100}))
    assert refused.status_code == 413 and refused["Content-Type"] == "application/json"
    assert "DELAYQ_API_MAX_BODY_BYTES" in refused.json()["error"]
    for body, words in ((b"[" * 500 + b"]" * 500, "must be a JSON object"), (b'{"ids": "x"}', "1 to 500"),
                        (b'{"ids": [1]}', "non-empty string"), (b'{"ids": []}', "1 to 500"),
                        (b'{"ids": ["a"], "more": 1}', "unknown field"), (b'{"ids": [NaN]}', "Infinity and NaN")):
        answer = post(url, body)
        assert answer.status_code == 400 and words in answer.json()["error"], (body, answer.content)


def _peak_bytes(post, body: bytes) -> tuple[int, object]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        answer = post(PUBLISH, body)
        return tracemalloc.get_traced_memory()[1], answer
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["empty objects", "batch of lists"])
def test_finding_a_4_mib_body_costs_a_few_times_its_size(api, site_queue, shape):
    # json.loads made ~110 MB of 4 MiB of "{}," (a dict per three bytes).
    post, _ = api
    site_queue.configure_topic("orders", max_payload_bytes=5 * MiB)
    if shape == "empty objects":
        body = b'{"payload": [' + b",".join([b"{}"] * (4 * MiB // 3 - 10)) + b"]}"
    else:
        item = b'{"payload": [' + b",".join([b"[]"] * 2_760) + b'], "headers": {"k": "v"}}'
        body = b'{"messages": [' + b",".join([item] * 500) + b"]}"
    assert 3.9 * MiB < len(body) <= 4 * MiB
    peak, answer = _peak_bytes(post, body)
    assert answer.status_code == 201, answer.content[:300]
    # About four copies at most: the test client's, the body read, a payload's slice, its Redis command.
    assert peak < 5 * len(body), f"{peak / MiB:.1f} MiB for a {len(body) / MiB:.1f} MiB body"
    first = site_queue.get("orders", answer.json()["results"][0]["id"])
    assert json.loads(first.payload)[:2] in ([{}, {}], [[], []])


def test_finding_headers_and_keys_have_their_own_limits(api, site_queue):
    post, _ = api
    big_headers = {f"h{i}": "v" * 100 for i in range(200)}       # ~21 KB of JSON
    assert "headers is" in _one(post, json.dumps({"payload": 1, "headers": big_headers}))
    assert "at most 16,384" in _one(post, json.dumps({"payload": 1, "headers": big_headers}))
    assert "key must be a non-empty string of at most 1,024" in _one(post, json.dumps({"payload": 1, "key": "k" * 1025}))
    assert "order_key" in _one(post, json.dumps({"payload": 1, "order_key": "k" * 1025}))
    assert "order_key" in _one(post, json.dumps({"payload": 1, "order_key": "k" * 300}))     # the engine's 256
    ok = post(PUBLISH, json.dumps({"payload": 1, "headers": {"a": "b" * 15_000}, "key": "k" * 1024}))
    assert ok.status_code == 201
    assert site_queue.get("orders", ok.json()["id"]).headers == {"a": "b" * 15_000}


def test_finding_message_page_never_renders_megabytes_of_headers(api, operator, site_queue):
    _, get = api
    huge = {f"h{i:05}": "v" * 1000 for i in range(2_000)}       # 2 MB, published from Python
    msg_id = site_queue.publish("orders", "x", headers=huge)
    page = operator.get(reverse("delayq:message", args=["orders", msg_id]))
    assert page.status_code == 200 and len(page.content) < 100_000
    assert "more characters of headers not shown" in page.content.decode()
    answer = get(reverse("delayq:api_message", args=["orders", msg_id]))
    assert answer.status_code == 200 and len(answer.content) < 100_000


def test_finding_reschedule_outside_the_representable_range_is_an_error(operator, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(3600, max_attempts=5), max_delay=10**12)
    msg_id = site_queue.publish("orders", "a", delay=60)
    tab = reverse("delayq:message_action", args=["orders", "default", "pending"])
    for when in ("9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "5000-01-01T00:00:00"):
        answer = operator.post(tab, {"action": "reschedule", "ids": [msg_id], "reschedule_at": when}, follow=True)
        assert answer.status_code == 200
        assert "Nothing was changed: the new due time must be between 1970-01-01 and" in answer.content.decode()
    all_url = reverse("delayq:bulk_state", args=["orders", "default", "pending", "reschedule"])
    preview = operator.get(all_url + "?reschedule_at=9999-12-31T23:59:59-14:00", follow=True)
    assert preview.status_code == 200 and "must be between 1970-01-01 and" in preview.content.decode()
    fine = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    done = operator.post(tab, {"action": "reschedule", "ids": [msg_id], "reschedule_at": fine.isoformat()}, follow=True)
    assert "Rescheduled 1 message" in done.content.decode()
    assert site_queue.get("orders", msg_id).due_at == fine


def test_finding_api_list_of_a_missing_topic_is_404(api):
    _, get = api
    missing = get(reverse("delayq:api_messages", args=["nosuchtopic", "ready"]))
    assert missing.status_code == 404 and "no topic nosuchtopic" in missing.json()["error"]
    assert get(reverse("delayq:api_messages", args=["orders", "ready"])).status_code == 200


def test_finding_publish_to_a_celery_bridge_topic_is_refused(api, site_queue):
    post, _ = api
    site_queue.configure_topic("celery.celery", retry=EnginePolicy.fixed(0, max_attempts=1))
    record = {"payload": {"content_type": "application/x-python-serialize", "body": "gASV"}}
    refused = post(reverse("delayq:api_publish", args=["celery.celery"]), json.dumps(record))
    assert refused.status_code == 403 and "only the Celery bridge publishes" in refused.json()["error"]
    assert site_queue.counts("celery.celery")["ready"] == 0
    assert not AuditEntry.objects.filter(action="message.publish").exists()
    # Replay of a dead bridge record stays (it moves the signed record unchanged).
    dead = site_queue.publish("celery.celery", b"{}")
    for delivery in site_queue.claim("celery.celery", 1):
        site_queue.nack(delivery, "broker down")
    replayed = post(reverse("delayq:api_replay", args=["celery.celery"]), json.dumps({"ids": [dead]}))
    assert replayed.status_code == 200 and replayed.json()["replayed"] == 1


def test_finding_lone_surrogate_payload_breaks_topic_pages(api, viewer, site_queue):
    """A lone \\ud800 in a payload, a header or a replay id was stored as sent and made the topic's
    tabs and the message page 500 for everyone: refused where it enters, and a payload written with
    one from Python (not through the API) is shown with the escape instead of failing the page."""
    post, _ = api
    for body in (b'{"payload": ["\\ud800"]}', b'{"payload": {"a": 1}, "headers": {"\\ud800x": "y"}}',
                 b'{"payload": "\\udc00 alone"}', b'{"payload": 1, "key": "k\\udfff"}'):
        assert "lone UTF-16 surrogate" in _one(post, body)
    ok = post(PUBLISH, b'{"payload": ["\\ud83d\\ude00", "\\\\ud800 is text"]}')   # a pair, an escaped backslash
    assert ok.status_code == 201
    replay = post(reverse("delayq:api_replay", args=["orders"]), b'{"ids": ["\\udc00"]}')
    assert replay.status_code == 400 and "surrogate" in replay.json()["error"]
    from_python = site_queue.publish("orders", b'["\\ud800"]', headers={"h": "\ud800"})
    for url in (reverse("delayq:topic_state", args=["orders", "ready"]),
                reverse("delayq:message", args=["orders", "default", from_python])):
        page = viewer.get(url)
        assert page.status_code == 200 and "\\ud800" in page.content.decode()


def test_finding_replay_body_with_a_huge_integer_is_a_500(api):
    post, _ = api
    for ids in (b"9" * 5000, b'{"a": ' + b"9" * 5000 + b"}"):
        answer = post(reverse("delayq:api_replay", args=["orders"]), b'{"ids": [' + ids + b"]}")
        assert answer.status_code == 400 and answer["Content-Type"] == "application/json", answer.content[:200]


def test_finding_dense_stored_payload_costs_hundreds_of_mb_on_every_view(viewer, admin_user, site_queue):
    """Every list row and message page parsed, redacted and pretty-printed the whole payload: a dense
    1 MiB of '[[]],' cost seconds and ~65x its size per view. Such a payload is now said, not walked;
    a user with view_payload still reveals it (as text, not pretty-printed)."""
    site_queue.configure_topic("dense", max_payload_bytes=2 * MiB)
    dense = b"[" + b",".join([b"[[]]"] * 200_000) + b"]"
    msg_id = site_queue.publish("dense", dense)
    tracemalloc.start()
    try:
        tab = viewer.get(reverse("delayq:topic_state", args=["dense", "ready"]))
        page = viewer.get(reverse("delayq:message", args=["dense", "default", msg_id]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tab.status_code == 200 and page.status_code == 200
    assert "too large to redact and show here" in page.content.decode()
    assert peak < 12 * len(dense), f"{peak / MiB:.0f} MiB for a {len(dense) / MiB:.1f} MiB payload"
    revealed = admin_user.post(reverse("delayq:message_reveal", args=["dense", "default", msg_id]))
    assert revealed.status_code == 200 and "[[]],[[]]" in revealed.content.decode()

