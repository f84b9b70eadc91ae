"""A small JSON API beside the pages, with the same permission checks and audit (session auth;
POSTs need the CSRF token like any form)."""

import json

from django.http import JsonResponse
from django.views.decorators.http import require_GET, require_POST

from . import audit, services
from .access import can, engine_errors
from .message_view import message_view
from .services.contracts import MessageState
from .views import parse_state, topic_name


def _guard(request, perm):
    if not request.user.is_authenticated:
        return JsonResponse({"error": "log in first"}, status=401)
    if not can(request.user, perm):
        return JsonResponse({"error": f"the '{perm}' permission is required"}, status=403)
    return None


@require_GET
@engine_errors(as_json=True)
def topics(request):
    if denied := _guard(request, "view_queue"):
        return denied
    rows = [{"name": t["name"], "managed": t["managed"], "paused": t["paused"], "counts": dict(t["counts"])}
            for t in services.topic_summaries()]
    return JsonResponse({"topics": rows})


@require_GET
@engine_errors(as_json=True)
def messages_list(request, name, state):
    """A page of messages, each with a redacted payload *preview* (first characters, the size and
    a ``truncated`` flag): 20 large payloads must not make a 4 MB response. One message's payload:
    message_payload."""
    if denied := _guard(request, "view_queue"):
        return denied
    name, state = topic_name(name), parse_state(state)
    page, cursor = services.message_page(name, state, after=request.GET.get("after") or None,
                                         search=request.GET.get("q", "").strip())
    rules = services.redaction_rules(name)
    out = []
    for m in page:
        view = message_view(m, request.user, rules)
        out.append({"id": m.id, "state": m.state.value if m.state else None, "attempts": m.attempts,
                    "due_at": m.due_at.isoformat() if m.due_at else None, "key": m.key,
                    "dead_at": m.dead_at.isoformat() if m.dead_at else None, "corrupt": m.corrupt,
                    "last_error": {k: view["error"][k] for k in ("type", "message", "fingerprint")}
                    if view["error"] else None,
                    "payload_preview": view["payload"]["preview"], "payload_size": view["payload"]["size"],
                    "payload_truncated": view["payload"]["truncated"], "redacted": view["payload"]["redacted"]})
    return JsonResponse({"messages": out, "next": cursor})


@require_GET
@engine_errors(as_json=True)
def message_payload(request, name, msg_id):
    """One message's whole payload, redacted by the topic's rules (a Viewer may read this; the
    unredacted bytes are a POST to the page's payload download, with view_payload, audited)."""
    if denied := _guard(request, "view_queue"):
        return denied
    name = topic_name(name)
    message = services.get_message(name, msg_id)
    if message is None:
        return JsonResponse({"error": "no such message (acked, cancelled, deleted or evicted)"}, status=404)
    view = message_view(message, request.user, services.redaction_rules(name))
    return JsonResponse({"id": message.id, "payload": view["payload"]["text"], "size": view["payload"]["size"],
                         "redacted": view["payload"]["redacted"], "headers": view["headers"]})


@require_POST
@engine_errors(as_json=True)
def replay(request, name):
    if denied := _guard(request, "replay_message"):
        return denied
    name = topic_name(name)
    try:
        ids = json.loads(request.body or b"{}").get("ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not 0 < len(ids) <= 500:
            raise ValueError
    except (ValueError, AttributeError):
        return JsonResponse({"error": 'send {"ids": ["<message id>", ...]} with 1 to 500 ids'}, status=400)
    moved = services.replay(name, ids, actor=f"user:{request.user.get_username()}")
    audit.record(request.user, "message.replay", topic=name, scope={"state": MessageState.dead.value, "via": "api"},
                 requested=len(ids), affected=moved, message_ids=ids, result="ok" if moved == len(ids) else "partial")
    services.forget_summary(name)
    return JsonResponse({"replayed": moved, "skipped": len(ids) - moved})
