"""Fuzzing the JSON API from its OpenAPI description: hypothesis builds requests for every operation
of dashboard/openapi.py (path and query parameters and bodies drawn from their schemas, mixed with
names that exist, junk text, arbitrary JSON and raw bytes), sent as a Viewer and as an Operator,
through the session, their own API tokens (full, read-only, publish-only, one topic) or a bad one,
to a real Redis holding topics, groups, dead messages, a running message with a journal and a
schedule. No answer may be a 5xx or show a
redacted value, and every answer must match the description (the check conftest installs for
every test here: openapi_check).

Bounded for the CI budget: FUZZ_EXAMPLES requests per role (DELAYQ_FUZZ_EXAMPLES for a longer
run; DELAYQ_FUZZ_RANDOM=1 for new ones), derandomized so CI runs the same requests each time."""

import json
import os
from datetime import UTC
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import openapi
from dashboard.models import ApiToken, RetryPolicy, Topic
from dashboard.services.contracts import QUERY_FIELDS

from .test_groups import two_groups
from .test_pages import kill

FUZZ_EXAMPLES = int(os.environ.get("DELAYQ_FUZZ_EXAMPLES", "400"))
TOPICS = ["orders", "reports", "nosuch", "celery.default", "-bad-"]
GROUPS = ["default", "billing", "nosuch", "messages", "replay"]

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)


def _term() -> st.SearchStrategy:
    """One term of the query language (queue_core.query), well formed or nearly."""
    path = st.lists(st.sampled_from(["customer", "id", "note", "0", "items", "tenant", "$x", "a-b"]), max_size=3)
    value = st.one_of(st.integers(-5, 50).map(str), st.sampled_from(["42", "acme", "order-*", "*", "**x*", "late",
                                                                     "TimeoutError", "boom", "1e309", "-0"]),
                      st.text(max_size=12).map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
                      st.text(max_size=8))
    return st.builds(lambda field, segs, op, v: field + "".join("." + x for x in segs) + op + v,
                     st.sampled_from([*QUERY_FIELDS, "fairness_key", "nosuch"]), path,
                     st.sampled_from([":", ">=", "<=", ">", "<", "="]), value)


# Parameters with a language of their own: drawn from it as well as from their schema.
LANGUAGES = {"q": st.lists(_term(), min_size=1, max_size=9).map(" ".join)}


def from_schema(schema: dict, doc: dict) -> st.SearchStrategy:
    """Values for a schema of the description: mostly what it allows, sometimes just outside (an
    integer past its maximum, a string that is not a time), so the refusals are exercised too."""
    if "$ref" in schema:
        return from_schema(doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], doc)
    for key in ("oneOf", "anyOf"):
        if key in schema and "properties" not in schema:
            return st.one_of([from_schema(s, doc) for s in schema[key]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        required = {k: from_schema(schema["properties"][k], doc) for k in schema.get("required", [])}
        optional = {k: from_schema(v, doc) for k, v in schema["properties"].items() if k not in required}
        shape = st.fixed_dictionaries(required, optional=optional)
        if "oneOf" in schema:   # PublishMessage: one of payload and payload_base64, most of the time
            shape = st.tuples(shape, st.sampled_from([s["required"] for s in schema["oneOf"]] + [[]])).map(
                lambda pair: pair[0] | {k: pair[0].get(k, 1) for k in pair[1]})
        return shape
    if kind == "object":
        return st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3) if "additionalProperties" in \
            schema else st.dictionaries(st.text(max_size=10), JSON, max_size=3)
    if kind == "array":
        return st.lists(from_schema(schema["items"], doc), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 5), 5))
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum")) | st.integers()
    if kind == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False) | st.floats(allow_nan=False)
    if kind == "string":
        if schema.get("format") == "date-time":
            return st.datetimes(timezones=st.just(UTC)).map(lambda t: t.isoformat()) | st.text(max_size=30)
        if schema.get("contentEncoding") == "base64":
            return st.binary(max_size=30).map(lambda b: __import__("base64").b64encode(b).decode()) | st.text(max_size=10)
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda t: len(t) < 12) | st.text(max_size=10)
        return st.text(min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 40), 40))
    return JSON


def operations(doc: dict) -> list[tuple[str, str, dict]]:
    return [(template, method, op) for template, item in doc["paths"].items() for method, op in item.items()]


def request_for(doc: dict, template: str, method: str, op: dict, known: dict) -> st.SearchStrategy:
    """(operation, method, path, query string, body) of one request to ``template``: mostly with the
    operation's method, sometimes another (a 405)."""
    def segment(name):
        real = st.sampled_from(known[name])
        return st.one_of(real, real, real, st.text(min_size=1, max_size=30)).map(lambda s: quote(s, safe=""))

    path_params = {p["name"]: segment(p["name"]) if p["name"] in known
                   else from_schema(p["schema"], doc) | st.text(min_size=1, max_size=30).map(lambda s: quote(s, safe=""))
                   for p in op.get("parameters", []) if p["in"] == "path"}
    query = {p["name"]: st.one_of(from_schema(p["schema"], doc), st.text(max_size=30),
                                  *[LANGUAGES[p["name"]]] * 2 if p["name"] in LANGUAGES else [])
             for p in op.get("parameters", []) if p["in"] == "query"}
    if "requestBody" in op:
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        body = (from_schema(schema, doc).map(lambda v: json.dumps(v).encode())
                | JSON.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=60))
    else:
        body = st.just(b"")
    return st.tuples(st.just(f"{method.upper()} {template}"),
                     st.sampled_from([method.upper()] * 6 + ["GET", "POST", "DELETE"]),
                     st.fixed_dictionaries(path_params).map(lambda values: template.format(**values)),
                     st.fixed_dictionaries({}, optional=query).map(urlencode), body)


@pytest.fixture
def known(site_queue, django_capture_on_commit_callbacks):
    """A Redis with something to find: dead messages in two groups, ready and delayed ones, a
    running one whose handler reported progress and logs on a managed topic with redaction rules,
    a schedule."""
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="jobs", retry_policy=RetryPolicy.objects.create(name="p"),
                             redaction_rules=["password"])
    running = site_queue.publish("jobs", {"user": "ann", "password": "hunter22"}, headers={"password": "x"})
    [delivery] = site_queue.claim("jobs", 1)
    delivery.message.progress(0.5, "half")
    delivery.message.log("password=hunter22 done")
    site_queue.report([delivery])
    dead = kill(site_queue, "orders", ["a", "b"])
    site_queue.publish("orders", {"customer": {"id": 42}, "note": "late fee", "items": [1, 2]},
                       headers={"tenant": "acme"}, key="order-1")
    site_queue.publish("orders", [{"id": 42}, None, "x" * 300], delay=60)
    billing = two_groups(site_queue, "payments")
    site_queue.configure_topic("reports")
    site_queue.upsert_schedule("nightly", topic="reports", cron="0 3 * * *", payload={"k": 1})
    return {"name": TOPICS + ["payments", "jobs"], "group": GROUPS, "msg_id": [*dead, *billing, running, "NOPE"]}


def _fuzz(persona, known):
    from django.urls import reverse

    bearers = [{"Authorization": "Bearer dq_nope"}]
    for access, topics in (("full", []), ("read", []), ("publish", []), ("full", ["payments"])):
        token = ApiToken(user=persona.user, name=f"fuzz {access} {topics}", access=access, topics=topics)
        bearers.append({"Authorization": f"Bearer {token.issue()}"})
        token.save()
    doc = openapi.document()
    base = reverse("delayq:api_schema")[:-len("/api/schema/")]
    strategies = [request_for(doc, t, m, op, known) for t, m, op in operations(doc)]
    auth = st.sampled_from([{}] * len(bearers) + bearers)     # half through the session

    seen = []

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=not os.environ.get("DELAYQ_FUZZ_RANDOM"),
              database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.one_of(strategies), auth)
    def one_request(request, headers):
        operation, method, path, query, body = request
        response = persona.generic(method, base + path + (f"?{query}" if query else ""), body,
                                   content_type="application/json", headers=headers)
        seen.append((operation, method, response.status_code))
        # Every answer has been checked against the description by now (openapi_check).
        assert b"hunter22" not in response.content, f"{method} {path}: a redacted value in the answer"
        assert response.status_code < 500, \
            f"{method} {path}?{query} body {body[:200]!r} -> {response.status_code}: {response.content[:500]!r}"

    one_request()
    sent = {operation for operation, method, _ in seen if operation.startswith(method)}
    assert sent == {f"{m.upper()} {t}" for t, m, _ in operations(doc)}, "an operation was never fuzzed"
    return {status for operation, method, status in seen if operation.startswith(method)}


@pytest.mark.django_db
def test_fuzz_the_api_as_a_viewer(viewer, known):
    statuses = _fuzz(viewer, known)
    assert {200, 400, 401, 403, 404} <= statuses    # read, refused input, bad token, no permission, nothing there


@pytest.mark.django_db
def test_fuzz_the_api_as_an_operator(operator, known):
    statuses = _fuzz(operator, known)
    assert {200, 201, 400, 401, 403, 404} <= statuses   # replayed, published, bad input, bad token, token scope, none
