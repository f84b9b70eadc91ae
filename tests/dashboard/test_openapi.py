"""api/schema/: the JSON API's OpenAPI description (dashboard/openapi.py). The description is a
valid OpenAPI 3.1 document, it lists exactly the API's routes, it is served like the rest of the
API (login or token), and the check every API test runs through (openapi_check) refuses what the
description does not say."""

import json
import re

import pytest
from django.http import JsonResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from openapi_spec_validator import validate

from dashboard import openapi

from .openapi_check import SchemaMismatch, check, errors


def _api_routes(patterns=None, prefix="") -> set[str]:
    """The named routes under api/ of the dashboard's URLconf, as OpenAPI path templates."""
    out = set()
    for p in patterns if patterns is not None else get_resolver("dashboard.urls").url_patterns:
        if isinstance(p, URLResolver):
            out |= _api_routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern) and p.name and str(p.pattern).startswith("api/"):
            out.add("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + str(p.pattern)))
    return out


def test_the_description_lists_exactly_the_apis_routes():
    assert set(openapi.PATHS) == _api_routes()


def test_the_served_description_is_valid_openapi_and_names_this_site(viewer, settings):
    settings.ROOT_URLCONF = "tests.dashboard.prefixed_urls"      # the dashboard mounted below the site's root
    response = viewer.get("/ops/queue/api/schema/")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    doc = response.json()
    validate(doc)                                                # openapi-spec-validator, OpenAPI 3.1
    assert doc["openapi"].startswith("3.1") and doc["servers"] == [{"url": "http://testserver/ops/queue"}]
    assert set(doc["components"]["securitySchemes"]) == {"session", "csrf", "token"}
    for template, item in doc["paths"].items():
        for method, operation in item.items():
            assert {"401", "403", "503"} <= set(operation["responses"]), (method, template)
            if method == "post":
                assert "413" in operation["responses"] and "requestBody" in operation, template


def test_the_description_is_served_like_the_rest_of_the_api(nobody, operator):
    url = reverse("delayq:api_schema")
    anonymous = Client().get(url)
    assert anonymous.status_code == 401 and "log in" in anonymous.json()["error"]
    assert nobody.get(url).status_code == 403
    assert operator.post(url).status_code == 405
    operator.get(reverse("delayq:tokens"))
    nonce = operator.session["delayq_token_form"]
    page = operator.post(reverse("delayq:tokens"), {"name": "reader", "nonce": nonce, "access": "read"})
    secret = re.search(rb"dq_[A-Za-z0-9_\-]+", page.content).group().decode()
    by_token = Client().get(url, headers={"Authorization": f"Bearer {secret}"})
    assert by_token.status_code == 200 and "/api/topics/{name}/messages/" in by_token.json()["paths"]


def test_the_check_refuses_what_the_description_does_not_say(viewer):
    topics = reverse("delayq:api_topics")
    with pytest.raises(SchemaMismatch, match="does not list status 418"):
        check("GET", topics, "", b"", JsonResponse({"error": "teapot"}, status=418))
    with pytest.raises(SchemaMismatch, match="does not match"):
        check("GET", topics, "", b"", JsonResponse({"topics": [], "cursor": None}))   # an undescribed field
    with pytest.raises(SchemaMismatch, match="expected 405"):
        check("DELETE", topics, "", b"", JsonResponse({"error": "no"}, status=404))
    with pytest.raises(SchemaMismatch, match="must be a 404"):
        check("GET", topics.replace("topics/", "nothing/"), "", b"", JsonResponse({"error": "x"}))
    with pytest.raises(SchemaMismatch, match="query parameter 'page'"):
        check("GET", topics, "page=2", b"", JsonResponse({"topics": []}))
    publish = reverse("delayq:api_publish", args=["orders"])
    published = JsonResponse({"topic": "orders", "published": 1, "accepted": 1, "failed": 0, "results": [{"index": 0, "id": "a"}],
                              "index": 0, "id": "a"}, status=201)
    check("POST", publish, "", json.dumps({"payload": 1, "delay": 5}).encode(), published)
    with pytest.raises(SchemaMismatch, match="body the description refuses"):
        check("POST", publish, "", json.dumps({"payload": 1, "delay": 5, "at": "2030-01-01T00:00:00Z"}).encode(),
              published)


def test_the_limits_are_the_codes():
    """The description's numbers come from the code that enforces them."""
    from dashboard.api_input import MAX_BATCH, MAX_REPLAY

    assert errors(openapi.ref("ReplayRequest"), {"ids": ["a"] * MAX_REPLAY}) == []
    assert errors(openapi.ref("ReplayRequest"), {"ids": ["a"] * (MAX_REPLAY + 1)}) != []
    assert errors(openapi.ref("PublishRequest"), {"messages": [{"payload": 1}] * (MAX_BATCH + 1)}) != []
    assert errors(openapi.ref("PublishRequest"), {"payload": 1, "payload_base64": "AA=="}) != []
    assert errors(openapi.ref("PublishRequest"), {"payload": 1, "priority": 99}) != []


def test_finding_an_unknown_api_address_is_a_404_for_every_method(operator):
    """Found by the fuzz run: a POST to an address under api/ that does not exist was a 405 "use
    GET" (the catch-all took GET only), as if the address existed."""
    nowhere = reverse("delayq:api_topics") + "x/y/z/w/v/"
    for method in ("GET", "POST", "PUT", "DELETE"):
        response = operator.generic(method, nowhere)
        assert response.status_code == 404 and f"no API at {nowhere}" in response.json()["error"], method


def test_finding_an_api_address_with_a_newline_is_a_json_404(viewer):
    """Found by the fuzz run: an address under api/ with an encoded newline (%0A) that no endpoint
    takes slipped past the catch-all (its "." stopped at the newline) to Django's HTML 404 page."""
    for tail in ("topics/orders/messages//%0A/", "nothing%0A", "%0A/%0A"):
        response = viewer.get(reverse("delayq:api_topics").replace("topics/", tail))
        assert response.status_code == 404 and response["Content-Type"] == "application/json", tail
        assert "no API at" in response.json()["error"]
