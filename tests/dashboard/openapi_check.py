"""Every request a dashboard test sends to the JSON API, and its answer, checked against the OpenAPI
description (dashboard/openapi.py) with a real validator: the address must be one the description
lists (or be answered with its 404), the method one it lists (or be answered with 405 and the
right Allow header), the status one it lists for the operation, and the body must match that
status's schema. A request that succeeded must itself match the description (its parameters and
body), so the description cannot be narrower than what the API accepts. conftest.py installs
``check`` on django.test.Client for every test under tests/dashboard."""

import json
import re
from functools import cache
from urllib.parse import parse_qsl

from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from jsonschema import Draft202012Validator
from openapi_schema_validator import OAS31Validator

from dashboard import openapi

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


# Larger bodies are not decoded here: test_api_input measures the API's own memory for 4 MiB bodies
# (json.loads of one would cost ~100 MB inside that measurement); their shape is that module's subject.
MAX_CHECKED_BODY = 1 << 20


class SchemaMismatch(AssertionError):
    pass


@cache
def _document() -> str:
    """The description, checked as a whole once (openapi-spec-validator), as JSON text."""
    from openapi_spec_validator import validate

    doc = openapi.document("http://testserver")
    validate(doc)
    return json.dumps(doc)


def document() -> dict:
    return json.loads(_document())


@cache
def _validator(schema_json: str):
    doc = json.loads(_document())
    root = {**json.loads(schema_json), "components": doc["components"]}   # so "#/components/..." resolves
    return OAS31Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER)


def errors(schema: dict, value) -> list[str]:
    """What is wrong with ``value`` for ``schema`` (a schema of the description), in words."""
    found = _validator(json.dumps(schema, sort_keys=True)).iter_errors(value)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in found]


def answer_errors(method: str, template: str, status: int, value) -> list[str]:
    """What is wrong with an answer that did not come through django.test.Client (a live server's)."""
    described = document()["paths"][template][method.lower()]["responses"].get(str(status))
    if described is None:
        return [f"{method} {template} does not list status {status}"]
    return errors(described["content"]["application/json"]["schema"], value)


def operation_of(path: str) -> tuple[str | None, dict | None]:
    """(template, path item) of an address of the current URLconf under the dashboard's api/;
    (None, None) for an address under api/ that no endpoint has; ("", None) outside api/."""
    try:
        base = reverse("delayq:api_schema")[:-len("schema/")]        # "/<mount>/api/"
    except NoReverseMatch:
        return "", None                                              # no dashboard here
    if not path.startswith(base):
        return "", None
    try:
        match = resolve(path)
    except Resolver404:
        return None, None
    if match.url_name is None:                                       # api.not_found: the catch-all
        return None, None
    mount = base[1:-len("api/")]
    template = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", match.route[len(mount):])
    item = document()["paths"].get(template)
    if item is None:
        raise SchemaMismatch(f"{path} is the endpoint {match.route!r} (urls.py), which dashboard/openapi.py's "
                             f"PATHS does not describe")
    return template, item


def _body(response, where: str):
    if response.get("Content-Type", "").split(";")[0] != "application/json":
        raise SchemaMismatch(f"{where}: answered {response.get('Content-Type')!r}, not JSON")
    return json.loads(response.content)


def check(method: str, path: str, query: str, body: bytes, response) -> None:
    """SchemaMismatch when this exchange is not what the description says."""
    template, item = operation_of(path)
    where = f"{method} {path} -> {response.status_code}"
    if template == "":
        return
    doc = document()
    if item is None:
        if response.status_code != 404:
            raise SchemaMismatch(f"{where}: an address under api/ that the description does not list must be a 404")
        _must_match(doc["components"]["responses"]["NoSuchAddress"], _body(response, where), where)
        return
    operation = item.get(method.lower())
    if operation is None:
        allowed = ", ".join(m.upper() for m in item if m in METHODS)
        if response.status_code != 405 or response.get("Allow") != allowed:
            raise SchemaMismatch(f"{where}: {template} takes only {allowed}; expected 405 with Allow: {allowed}, "
                                 f"got Allow: {response.get('Allow')}")
        _must_match(doc["components"]["responses"]["MethodNotAllowed"], _body(response, where), where)
        return
    described = operation["responses"].get(str(response.status_code))
    if described is None:
        raise SchemaMismatch(f"{where}: {method} {template} does not list status {response.status_code} "
                             f"(it lists {', '.join(operation['responses'])}); body {response.content[:300]!r}")
    _must_match(described, _body(response, where), where)
    if 200 <= response.status_code < 300:
        _request_must_match(operation, template, path, query, body, where)


def _must_match(described: dict, value, where: str) -> None:
    schema = described["content"]["application/json"]["schema"]
    if problems := errors(schema, value):
        raise SchemaMismatch(f"{where}: the answer does not match the description: {'; '.join(problems[:5])}")


def _request_must_match(operation: dict, template: str, path: str, query: str, body: bytes, where: str) -> None:
    params = {(p["in"], p["name"]): p for p in operation.get("parameters", [])}
    pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
    tail = re.search(pattern.replace("^", "", 1), path)
    values = {("path", k): v for k, v in tail.groupdict().items()} if tail else {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if ("query", name) not in params:
            raise SchemaMismatch(f"{where}: the request's query parameter {name!r} is not described")
        values[("query", name)] = value
    for key, p in params.items():
        if key not in values:
            if p["required"]:
                raise SchemaMismatch(f"{where}: succeeded without the required {p['in']} parameter {p['name']!r}")
            continue
        if problems := errors(p["schema"], values[key]):
            raise SchemaMismatch(f"{where}: succeeded with {p['in']} parameter {p['name']}={values[key]!r}, which the "
                                 f"description refuses: {'; '.join(problems)}")
    if "requestBody" in operation and len(body) <= MAX_CHECKED_BODY:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        try:
            value = json.loads(body)
        except ValueError:
            raise SchemaMismatch(f"{where}: succeeded with a body that is not JSON: {body[:200]!r}") from None
        if problems := errors(schema, value):
            raise SchemaMismatch(f"{where}: succeeded with a body the description refuses: {'; '.join(problems[:5])}")


def install(monkeypatch) -> None:
    """Check every exchange of django.test.Client (and its subclasses) from now to the test's end."""
    from django.test.client import Client

    original = Client.request

    def request(self, **environ):
        response = original(self, **environ)
        wsgi = environ.get("wsgi.input")
        body = b""
        if wsgi is not None and hasattr(wsgi, "_FakePayload__content"):
            body = wsgi._FakePayload__content.getvalue()
        path = environ.get("PATH_INFO", "/").encode("iso-8859-1").decode("utf-8", "replace")   # as WSGI carries it
        check(environ.get("REQUEST_METHOD", "GET"), path, environ.get("QUERY_STRING", ""), body, response)
        return response

    monkeypatch.setattr(Client, "request", request)
