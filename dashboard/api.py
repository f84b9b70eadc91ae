"""A small JSON API beside the pages, with the same permission checks and audit (session auth;
POSTs need the CSRF token like any form). Every answer is JSON, errors too: 400, 401, 403 (a
missing permission or a failed CSRF check), 404, 405 and 503 carry ``{"error": "..."}``."""

import json
from functools import wraps

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from . import audit, services
from .access import can, engine_errors
from .message_view import message_view
from .services.contracts import MessageState
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
            if request.method not in SAFE_METHODS:
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


@api_view("GET")
def not_found(request, rest=""):
    """Any other address under api/: JSON, not Django's HTML 404 page."""
    raise Http404(f"no API at {request.path}; the API is topics/, topics/<topic>/[<group>/]<state>/, "
                  f"topics/<topic>/[<group>/]messages/<id>/ and POST topics/<topic>/[<group>/]replay/ "
                  f"(without a group: the default group)")


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
    moved = services.replay(name, ids, actor=f"user:{request.user.get_username()}", group=group)
    audit.record(request.user, "message.replay", topic=name, group=group,
                 scope={"state": MessageState.dead.value, "via": "api"}, requested=len(ids), affected=moved,
                 message_ids=ids, result="ok" if moved == len(ids) else "partial")
    services.forget_summary(name, group)
    return JsonResponse({"group": group, "replayed": moved, "skipped": len(ids) - moved})
