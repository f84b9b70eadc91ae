"""A small JSON API beside the pages, with the same permission checks and audit. Two ways in: the
session (POSTs need the CSRF token like any form) or a personal API token
(``Authorization: Bearer dq_...``, no CSRF: a browser never sends it on its own), which acts as its
owner with the owner's permissions and is named in the audit of every action taken with it. Every
answer is JSON, errors too: 400, 401, 403 (a missing permission or a failed CSRF check), 404, 405,
413 and 503 carry ``{"error": "..."}``."""

import base64
import binascii
import json
from datetime import datetime
from functools import wraps

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from . import audit, conf, services
from .access import can, engine_errors
from .message_view import message_view
from .models import ApiToken
from .services.contracts import MessageState, NotReplicated, QueueError, Unavailable
from .views import group_name, parse_state, topic_name

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class _JsonCsrf(CsrfViewMiddleware):
    """Django's CSRF check, unchanged, with its refusal said in JSON instead of the HTML page."""

    def _reject(self, request, reason):
        return JsonResponse({"error": f"CSRF check failed ({reason}): send the csrftoken cookie's value in the "
                                      f"X-CSRFToken header"}, status=403)


_CSRF = _JsonCsrf(lambda request: None)   # stateless: one instance serves every request


def api_view(*methods: str):
    """The API's one wrapper: allowed methods (405 with Allow), the CSRF check for unsafe methods
    (403), Http404 and PermissionDenied from the helpers (404, 403) and engine failures
    (engine_errors: 400, 503), all as JSON."""
    def decorator(view):
        checked = engine_errors(view, as_json=True)

        @csrf_exempt        # checked below, so a refusal is JSON too
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method not in methods:
                response = JsonResponse({"error": f"{request.method} is not allowed here; use "
                                                  f"{' or '.join(methods)}"}, status=405)
                response["Allow"] = ", ".join(methods)
                return response
            request.delayq_token = None
            if _bearer(request) is not None:
                if refused := _token_auth(request):
                    return refused
            elif request.method not in SAFE_METHODS:
                refused = _CSRF.process_view(request, view, args, kwargs)
                if refused is not None:
                    return refused
            try:
                return checked(request, *args, **kwargs)
            except Http404 as exc:
                return JsonResponse({"error": str(exc) or "not found"}, status=404)
            except PermissionDenied as exc:
                return JsonResponse({"error": str(exc) or "permission denied"}, status=403)
        return wrapped
    return decorator


def _bearer(request) -> str | None:
    """The token of ``Authorization: Bearer <token>`` ("" when empty); None for no header or another
    scheme (a proxy's Basic auth in front of the site, say: such requests use the session)."""
    scheme, _, secret = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return secret.strip() if scheme.lower() == "bearer" else None


def _token_auth(request):
    """Authenticate the Bearer token: the request then acts as the token's owner."""
    secret = _bearer(request)
    if not secret:
        return JsonResponse({"error": 'send "Authorization: Bearer <API token>" (or log in and use the session)'},
                            status=401)
    token = ApiToken.authenticate(secret)
    if token is None:
        return JsonResponse({"error": "this API token is unknown, revoked or expired (or its owner is inactive): "
                                      "create a new one on the API tokens page"}, status=401)
    request.user, request.delayq_token = token.user, token
    return None


def _via(request) -> dict:
    """How an audited API action came in: the session, or which token."""
    token = request.delayq_token
    return {"via": "api"} if token is None else {"via": "api token", "token": str(token)}


@api_view("GET")
def not_found(request, rest=""):
    """Any other address under api/: JSON, not Django's HTML 404 page."""
    raise Http404(f"no API at {request.path}; the API is topics/, topics/<topic>/[<group>/]<state>/, "
                  f"topics/<topic>/[<group>/]messages/<id>/, POST topics/<topic>/[<group>/]replay/ "
                  f"(without a group: the default group) and POST topics/<topic>/messages/ (publish)")


def _guard(request, perm):
    if not request.user.is_authenticated:
        return JsonResponse({"error": "log in first"}, status=401)
    if not can(request.user, perm):
        return JsonResponse({"error": f"the '{perm}' permission is required"}, status=403)
    return None


@api_view("GET")
def topics(request):
    if denied := _guard(request, "view_queue"):
        return denied
    rows = [{"name": t["name"], "managed": t["managed"], "paused": t["paused"], "partitions": t["partitions"],
             "counts": dict(t["counts"]),
             "groups": [{"name": g["name"], "paused": g["summary"]["paused"], "counts": dict(g["counts"]),
                         "workers": g["summary"]["workers"]} for g in t["groups"]]}
            for t in services.topic_summaries()[0]]
    return JsonResponse({"topics": rows})


@api_view("GET")
def messages_list(request, name, state, group=None):
    """A page of one group's messages, each with a redacted payload *preview* (first characters, the size and
    a ``truncated`` flag): 20 large payloads must not make a 4 MB response. One message's payload:
    message_payload."""
    if denied := _guard(request, "view_queue"):
        return denied
    name, state = topic_name(name), parse_state(state)
    group = group_name(name, group)
    page, cursor = services.message_page(name, state, after=request.GET.get("after") or None,
                                         search=request.GET.get("q", "").strip(), group=group)
    rules = services.redaction_rules(name)
    out = []
    for m in page:
        view = message_view(m, request.user, rules)
        out.append({"id": m.id, "group": group, "partition": m.partition,
                    "state": m.state.value if m.state else None, "attempts": m.attempts,
                    "due_at": m.due_at.isoformat() if m.due_at else None, "key": m.key,
                    "dead_at": m.dead_at.isoformat() if m.dead_at else None, "corrupt": m.corrupt,
                    "last_error": {k: view["error"][k] for k in ("type", "message", "fingerprint")}
                    if view["error"] else None,
                    "payload_preview": view["payload"]["preview"], "payload_size": view["payload"]["size"],
                    "payload_truncated": view["payload"]["truncated"], "redacted": view["payload"]["redacted"]})
    return JsonResponse({"group": group, "messages": out, "next": cursor})


@api_view("GET")
def message_payload(request, name, msg_id, group=None):
    """One message's whole payload, redacted by the topic's rules (a Viewer may read this; the
    unredacted bytes are a POST to the page's payload download, with view_payload, audited)."""
    if denied := _guard(request, "view_queue"):
        return denied
    name = topic_name(name)
    group = group_name(name, group)
    message = services.get_message(name, msg_id, group)
    if message is None:
        return JsonResponse({"error": f"no such message in group {group} (acked, cancelled, deleted or evicted)"},
                            status=404)
    view = message_view(message, request.user, services.redaction_rules(name))
    return JsonResponse({"id": message.id, "group": group, "payload": view["payload"]["text"], "size": view["payload"]["size"],
                         "redacted": view["payload"]["redacted"], "headers": view["headers"]})


@api_view("POST")
def replay(request, name, group=None):
    if denied := _guard(request, "replay_message"):
        return denied
    name = topic_name(name)
    group = group_name(name, group)
    try:
        ids = json.loads(request.body or b"{}").get("ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not 0 < len(ids) <= 500:
            raise ValueError
    except (ValueError, AttributeError):
        return JsonResponse({"error": 'send {"ids": ["<message id>", ...]} with 1 to 500 ids'}, status=400)
    try:
        moved = services.replay(name, ids, actor=f"user:{request.user.get_username()}", group=group)
    except NotReplicated as exc:
        audit.record(request.user, "message.replay", topic=name, group=group,
                     scope={"state": MessageState.dead.value, **_via(request)}, requested=len(ids),
                     affected=len(exc.ids), message_ids=ids, result="unconfirmed", detail=str(exc))
        # 503: safe to send again (replay skips what is no longer dead); the ids did move on the master.
        return JsonResponse({"error": str(exc), "unconfirmed": list(exc.ids)}, status=503)
    audit.record(request.user, "message.replay", topic=name, group=group,
                 scope={"state": MessageState.dead.value, **_via(request)}, requested=len(ids), affected=moved,
                 message_ids=ids, result="ok" if moved == len(ids) else "partial")
    services.forget_summary(name, group)
    return JsonResponse({"group": group, "replayed": moved, "skipped": len(ids) - moved})


MAX_BATCH = 500
PUBLISH_FIELDS = {"payload", "payload_base64", "delay", "at", "key", "order_key", "headers", "ttl", "partition",
                  "max_attempts"}


def _number(item, field, *, low=0.0, integer=False):
    value = item.get(field)
    if value is None:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < low:
        raise ValueError(f"{field} must be {'an integer' if integer else 'a number'} >= {low:g}, not {value!r}")
    return value


def _text(item, field):
    value = item.get(field)
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{field} must be a non-empty string")
    return value


def publish_arguments(item) -> tuple[object, dict]:
    """(payload, keyword arguments of DelayQueue.publish) from one message of a publish request;
    ValueError saying what is wrong. A string payload is published as its UTF-8 text, any other
    JSON value as JSON, ``payload_base64`` as the bytes it encodes."""
    if not isinstance(item, dict):
        raise ValueError("each message must be a JSON object")
    if unknown := sorted(set(item) - PUBLISH_FIELDS):
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(PUBLISH_FIELDS))}")
    if ("payload" in item) == ("payload_base64" in item):
        raise ValueError("give exactly one of payload (any JSON value) and payload_base64 (bytes)")
    if "payload" in item:
        payload = item["payload"]
    else:
        try:
            payload = base64.b64decode(item["payload_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ValueError("payload_base64 is not valid base64") from None
    kwargs = {"delay": _number(item, "delay") or 0, "ttl": _number(item, "ttl", low=0.001),
              "partition": _number(item, "partition", integer=True), "key": _text(item, "key"),
              "order_key": _text(item, "order_key"), "max_attempts": _number(item, "max_attempts", low=1, integer=True)}
    if item.get("at") is not None:
        if item.get("delay") is not None:
            raise ValueError("give delay or at, not both")
        try:
            at = datetime.fromisoformat(item["at"])
        except (TypeError, ValueError):
            raise ValueError(f"at must be an ISO 8601 time with an offset, not {item['at']!r}") from None
        if at.tzinfo is None:
            raise ValueError("at needs an offset (e.g. 2026-11-23T18:00:00+00:00): a time without one is ambiguous")
        kwargs["at"] = at
    headers = item.get("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise ValueError("headers must be an object of strings")
        kwargs["headers"] = headers
    return payload, {k: v for k, v in kwargs.items() if v is not None}


@api_view("POST")
def publish(request, name):
    """Publish one message (a JSON object with ``payload``) or a batch (``{"messages": [...]}``,
    up to MAX_BATCH) to every consumer group of an existing topic. Each message succeeds or fails
    on its own: the answer lists an id or an error per message, in order (201 all published, 207
    some, 400 none). The body's size is checked against DELAYQ_API_MAX_BODY_BYTES before it is read."""
    if denied := _guard(request, "publish_message"):
        return denied
    name = topic_name(name)
    limit = conf.api_max_body_bytes()
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    too_big = JsonResponse({"error": f"the request body is larger than {limit:,} bytes (DELAYQ_API_MAX_BODY_BYTES): "
                                     f"send fewer messages per request, or store large blobs elsewhere and "
                                     f"publish a reference"}, status=413)
    if declared > limit:
        return too_big
    raw = request.read(limit + 1)     # not request.body: that applies Django's own, unrelated limit
    if len(raw) > limit:
        return too_big
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return JsonResponse({"error": "the body is not JSON: send one message as {\"payload\": ...} or a batch as "
                                      "{\"messages\": [{\"payload\": ...}, ...]}"}, status=400)
    single = isinstance(body, dict) and "messages" not in body
    items = [body] if single else body.get("messages") if isinstance(body, dict) else None
    if not isinstance(items, list) or not 0 < len(items) <= MAX_BATCH:
        return JsonResponse({"error": f'"messages" must be a list of 1 to {MAX_BATCH} messages'}, status=400)
    if not services.topic_exists(name):
        raise Http404(f"no topic {name}: create it first (the admin's Topics, or any publish from Python)")
    actor = f"user:{request.user.get_username()}"
    results = []
    for index, item in enumerate(items):
        try:
            payload, kwargs = publish_arguments(item)
            results.append({"index": index, "id": services.publish(name, payload, actor=actor, **kwargs)})
        except Unavailable:
            raise
        except NotReplicated as exc:   # it exists on the master: say which id, so a retry can be checked
            results.append({"index": index, "error": str(exc), "unconfirmed_id": exc.ids[0]})
        except (ValueError, QueueError) as exc:
            results.append({"index": index, "error": str(exc)})
    ids = [r["id"] for r in results if "id" in r]
    failed = len(results) - len(ids)
    audit.record(request.user, "message.publish", topic=name, scope=_via(request), requested=len(items),
                 affected=len(ids), message_ids=ids, result="ok" if not failed else "partial" if ids else "failed",
                 detail="; ".join(f"#{r['index']}: {r['error']}" for r in results if "error" in r)[:2000])
    services.forget_summary(name)
    status = 201 if not failed else 207 if ids else 400
    answer = {"topic": name, "published": len(ids), "failed": failed, "results": results}
    if single:
        answer.update(results[0])
    return JsonResponse(answer, status=status)
