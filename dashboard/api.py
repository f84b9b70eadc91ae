"""A small JSON API beside the pages, with the same permission checks and audit. Two ways in: the
session (POSTs need the CSRF token like any form) or a personal API token
(``Authorization: Bearer dq_...``, no CSRF: a browser never sends it on its own), which acts as its
owner with the owner's permissions and is named in the audit of every action taken with it. A
token's scope (read-only, publish-only, some topics: ApiToken) narrows that on every request. Every
answer is JSON, errors too: 400, 401, 403 (a missing permission, a token's scope or a failed CSRF
check), 404, 405, 413, 503 and 507 (a topic's memory budget is full) carry ``{"error": "..."}``. Bodies are read by api_input, which
refuses what is malformed or too large without decoding the payloads."""

from functools import wraps

from django.core.exceptions import PermissionDenied
from django.http import Http404, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from . import audit, conf, services
from .access import can, engine_errors
from .api_input import (
    MAX_BATCH,
    MAX_REPLAY,
    BodyError,
    publish_arguments,
    publish_messages,
    read_body,
    replay_ids,
)
from .finding import message_url, state_messages
from .message_view import journal_json, message_view
from .models import ApiToken
from .services.contracts import (
    MessageState,
    NotReplicated,
    QueueError,
    TopicFull,
    Unavailable,
    is_bridge_topic,
)
from .views import group_name, parse_state, topic_name
from .views_workers import BadSort, sorted_workers, worker_sort

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class _JsonCsrf(CsrfViewMiddleware):
    """Django's CSRF check, unchanged, with its refusal said in JSON instead of the HTML page."""

    def _reject(self, request, reason):
        return JsonResponse({"error": f"CSRF check failed ({reason}): send the csrftoken cookie's value in the "
                                      f"X-CSRFToken header"}, status=403)


_CSRF = _JsonCsrf(lambda request: None)   # stateless: one instance serves every request


def api_view(*methods: str, does: str | None = "read"):
    """The API's one wrapper: allowed methods (405 with Allow), the CSRF check for unsafe methods
    (403), a token's scope for what the view ``does`` ("read", "publish", "change"; and for its
    topic) (403), Http404 and PermissionDenied from the helpers (404, 403) and engine failures
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
                if refused := _token_auth(request) or _out_of_scope(request.delayq_token, does, kwargs.get("name")):
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
        return JsonResponse({"error": "this API token is unknown, revoked or expired (or its owner is inactive, or "
                                      "changed their password since): create a new one on the API tokens page"},
                            status=401)
    request.user, request.delayq_token = token.user, token
    return None


def _out_of_scope(token: ApiToken, does: str | None, topic: str | None):
    """403 when the token's scope does not cover this request, else None."""
    if does is None:
        return None
    if token.access == ApiToken.Access.READ and does != "read":
        return JsonResponse({"error": "this API token is read-only: create a token with more access on the API "
                                      "tokens page"}, status=403)
    if token.access == ApiToken.Access.PUBLISH and does != "publish":
        return JsonResponse({"error": "this API token may only publish (POST topics/<topic>/messages/): use "
                                      "another token to read or replay"}, status=403)
    if topic is not None and not token.allows_topic(topic):
        return JsonResponse({"error": f"this API token is limited to the topics {', '.join(token.topics)}"},
                            status=403)
    return None


def _via(request) -> dict:
    """How an audited API action came in: the session, or which token."""
    token = request.delayq_token
    return {"via": "api"} if token is None else {"via": "api token", "token": str(token),
                                                 "token_scope": token.scope_words}


@csrf_exempt     # it does nothing, for anyone: no CSRF or login to check
def not_found(request, rest=""):
    """Any other address under api/, whatever the method: JSON, not Django's HTML 404 page (nor a
    405 saying "use GET" for an address that does not exist)."""
    return JsonResponse({"error": f"no API at {request.path}; the API is schema/ (its OpenAPI description), topics/, "
                                  f"workers/, schedules/, find/?q=<id, prefix or key>, "
                                  f"topics/<topic>/[<group>/]<state>/[?q=<query>], topics/<topic>/[<group>/]messages/<id>/, "
                                  f"POST topics/<topic>/[<group>/]replay/ (without a group: the default group) and "
                                  f"POST topics/<topic>/messages/ (publish)"}, status=404)


def _guard(request, perm):
    if not request.user.is_authenticated:
        return JsonResponse({"error": "log in first"}, status=401)
    if not can(request.user, perm):
        return JsonResponse({"error": f"the '{perm}' permission is required"}, status=403)
    return None


@api_view("GET")
def schema(request):
    """This API's OpenAPI description (dashboard/openapi.py), its server this site's dashboard."""
    from . import openapi  # here: openapi reads this module's limits

    if denied := _guard(request, "view_queue"):
        return denied
    return JsonResponse(openapi.document(openapi.server_url(request)))


@api_view("GET")
def topics(request):
    if denied := _guard(request, "view_queue"):
        return denied
    token = request.delayq_token
    rows = [{"name": t["name"], "managed": t["managed"], "paused": t["paused"], "partitions": t["partitions"],
             "counts": dict(t["counts"]),
             "groups": [{"name": g["name"], "paused": g["summary"]["paused"], "counts": dict(g["counts"]),
                         "workers": g["summary"]["workers"]} for g in t["groups"]]}
            for t in services.topic_summaries()[0] if token is None or token.allows_topic(t["name"])]
    return JsonResponse({"topics": rows})


@api_view("GET")
def workers(request):
    """The Workers page as JSON: live workers (``?sort=`` as there) and the consumer groups without
    one. A token limited to some topics sees only those: a worker's other topics are left out, and
    so is a worker with none of them."""
    if denied := _guard(request, "view_queue"):
        return denied
    try:
        sort = worker_sort(request.GET.get("sort"))
    except BadSort as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    token = request.delayq_token
    shown = (lambda topic: True) if token is None else token.allows_topic
    report = services.live_workers()
    rows = []
    for w in sorted_workers(report["workers"], sort):
        if topics := [t for t in w["topics"] if shown(t)]:
            rows.append({**w, "topics": topics, "started": w["started"].isoformat() if w["started"] else None,
                         "last_beat": w["last_beat"].isoformat()})
    return JsonResponse({"now": report["now"].isoformat(), "live_within_s": services.LIVE_WITHIN_S,
                         "workers": rows, "groups_without_workers": [{"topic": t, "group": g}
                                                                     for t, g in report["unattended"] if shown(t)]})


SCHEDULES_PAGE = 50       # schedules per answer unless ?limit= says otherwise
MAX_SCHEDULES_PAGE = 200


@api_view("GET")
def schedules(request):
    """The Schedules page as JSON, a page at a time: up to ``?limit=`` (50; at most 200) schedules
    by name, each with its topic, state, expression in words, next fire times, counters, pause
    note and last 20 ticks (never its payload); ``?q=`` keeps those whose name or topic contains
    it; ``"next"`` is the ``?after=`` of the following page (null on the last). A token limited to
    some topics sees only their schedules."""
    if denied := _guard(request, "view_queue"):
        return denied
    limit = request.GET.get("limit") or str(SCHEDULES_PAGE)
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= MAX_SCHEDULES_PAGE:   # not '²
        return JsonResponse({"error": f"limit: {limit[:20]!r} is not a whole number from 1 to {MAX_SCHEDULES_PAGE}"},
                            status=400)
    token = request.delayq_token
    # InvalidArgument (a cursor no schedule could be named) is a 400 through api_view.
    rows, cursor = services.schedule_page(request.GET.get("q", "").strip()[:200], after=request.GET.get("after") or None,
                                          limit=int(limit), shown=(lambda topic: True) if token is None
                                          else token.allows_topic)

    def iso(dt):
        return dt.isoformat() if dt else None
    return JsonResponse({"schedules": [{**s, "next": [iso(t) for t in s["next"]],
                                        "paused": {**s["paused"], "at": iso(s["paused"]["at"])} if s["paused"] else None,
                                        "ticks": [{**t, "tick": iso(t["tick"])} for t in s["ticks"]]} for s in rows],
                         "next": cursor})


@api_view("GET")
def messages_list(request, name, state, group=None):
    """A page of one group's messages, each with a redacted payload *preview* (first characters, the size and
    a ``truncated`` flag): 20 large payloads must not make a 4 MB response. One message's payload:
    message_payload."""
    if denied := _guard(request, "view_queue"):
        return denied
    name, state = topic_name(name), parse_state(state)
    if not services.topic_exists(name):
        raise Http404(f"no topic {name}: GET topics/ lists the topics")
    group = group_name(name, group)
    rules = services.redaction_rules(name)
    # QueryError (an InvalidArgument) is a 400 through api_view.
    page, cursor, scan = state_messages(name, state, request.GET.get("q", "").strip(),
                                        after=request.GET.get("after") or None, group=group)
    out = []
    for m in page:
        view = message_view(m, request.user, rules)
        out.append({"id": m.id, "group": group, "partition": m.partition,
                    "state": m.state.value if m.state else None, "attempts": m.attempts,
                    "due_at": m.due_at.isoformat() if m.due_at else None, "key": m.key,
                    "priority": m.priority, "fairness_key": m.fairness_key,
                    "lateness_cause": m.lateness_cause, "late_behind": m.late_behind,
                    "dead_at": m.dead_at.isoformat() if m.dead_at else None, "corrupt": m.corrupt,
                    "last_error": {k: view["error"][k] for k in ("type", "message", "fingerprint")}
                    if view["error"] else None,
                    "payload_preview": view["payload"]["preview"], "payload_size": view["payload"]["size"],
                    "payload_truncated": view["payload"]["truncated"], "redacted": view["payload"]["redacted"]})
    answer = {"group": group, "messages": out, "next": cursor}
    if scan is not None:   # a query: how far the scan got; "next" continues it
        answer["scan"] = {"scanned": scan.scanned, "total": scan.total, "matched": scan.matched, "done": scan.done}
    return JsonResponse(answer)


@api_view("GET")
def find(request):
    """``?q=`` an id, an id prefix or a dedup key: where the message is in every topic, group
    and partition, or where the event stream last saw it (FindResult). A token limited to some
    topics sees only those."""
    if denied := _guard(request, "view_queue"):
        return denied
    text = request.GET.get("q", "").strip()
    if not text:
        return JsonResponse({"error": "give ?q= an id, an id prefix or a dedup key"}, status=400)
    token = request.delayq_token
    shown = (lambda topic: True) if token is None else token.allows_topic
    result = services.find(text)
    return JsonResponse({
        "q": text, "complete": result.complete, "gaps": result.gaps,
        "found": [{"topic": f.topic, "group": f.group, "partition": f.partition, "id": f.id, "state": f.state.value,
                   "url": request.build_absolute_uri(message_url(f))} for f in result.found if shown(f.topic)],
        "seen": [{"topic": s.topic, "group": s.group, "partition": s.partition, "id": s.id, "event": s.event,
                  "at": s.at.isoformat() if s.at else None, "actor": s.actor} for s in result.seen if shown(s.topic)]})


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
    view = message_view(message, request.user, services.redaction_rules(name),
                        journal=services.journal(name, msg_id, group))
    return JsonResponse({"id": message.id, "group": group, "payload": view["payload"]["text"], "size": view["payload"]["size"],
                         "redacted": view["payload"]["redacted"], "headers": view["headers"],
                         "state": message.state.value if message.state else None,
                         "waiting_for": message.waiting_for,   # publish(after=): the id whose ack releases it
                         "lateness_cause": message.lateness_cause, "late_behind": message.late_behind,
                         "journal": journal_json(view["journal"])})


@api_view("GET")
def batch(request, name, batch_id):
    """A batch's counts and callbacks per group (the batch page's, as JSON)."""
    if denied := _guard(request, "view_queue"):
        return denied
    name = topic_name(name)
    try:
        found = services.batch_view(name, services.batch_id(batch_id))
    except services.UnknownBatch as exc:
        return JsonResponse({"error": str(exc)}, status=404)
    if found is None:
        return JsonResponse({"error": f"topic {name} has no batch {batch_id}"}, status=404)
    status, groups = found
    times = services.batch_times(status)
    return JsonResponse({
        "id": status.id, "topic": name, "partition": status.partition, "created_at": times["created_at"].isoformat(),
        "sealed_at": times["sealed_at"].isoformat() if times["sealed_at"] else None, "group": status.group,
        "callbacks": {kind: topic for kind, (topic, _payload) in status.callbacks.items()},
        "groups": [{"group": g.group, "total": g.total, "acked": g.acked, "dead": g.dead, "removed": g.removed,
                    "pending": g.pending, "eta_s": g.eta_s, "unsent": [c["kind"] for c in g.callbacks if c["unsent"]],
                    "failed": {c["kind"]: c["failed"] for c in g.callbacks if c["failed"]},
                    "fired": {c["kind"]: c["fired_at"].isoformat() for c in g.callbacks if c["fired_at"]}}
                   for g in groups]})


@api_view("POST", does="change")
def replay(request, name, group=None):
    if denied := _guard(request, "replay_message"):
        return denied
    name = topic_name(name)
    group = group_name(name, group)
    try:
        ids = replay_ids(read_body(request, conf.api_max_body_bytes()), MAX_REPLAY)
    except BodyError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
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


def _budget(exc: TopicFull) -> dict:
    return {"budget": f"max_{exc.budget}", "limit": exc.limit, "partition": exc.partition, "share": exc.share,
            "used": exc.used, "adding": exc.adding}


@api_view("POST", does="publish")
def publish(request, name):
    """Publish one message (a JSON object with ``payload``) or a batch (``{"messages": [...]}``,
    up to MAX_BATCH) to every consumer group of an existing topic. Each message succeeds or fails
    on its own: the answer lists an id and its outcome (published, duplicate, throttled, debounced:
    see ``dedup``) or an error per message, in order (201 all accepted, 207 some, 400 none; 507 none
    when the topic's memory budget refused every one of them, each such error with a ``budget``
    object; a mix of budget and other refusals is 400). The body's size is checked against DELAYQ_API_MAX_BODY_BYTES before it is read.
    A Celery bridge topic (celery.*) is refused: only the bridge writes the records its forwarder
    hands to the broker."""
    if denied := _guard(request, "publish_message"):
        return denied
    name = topic_name(name)
    if is_bridge_topic(name):
        return JsonResponse({"error": f"{name} is a Celery bridge topic: only the Celery bridge publishes to it "
                                      f"(call the task's apply_async with a countdown or eta)"}, status=403)
    try:
        single, items = publish_messages(read_body(request, conf.api_max_body_bytes()))
    except BodyError as exc:
        return JsonResponse({"error": f"{exc}; send one message as {{\"payload\": ...}} or a batch as "
                                      f"{{\"messages\": [{{\"payload\": ...}}, ...]}} (1 to {MAX_BATCH})"},
                            status=exc.status)
    if not services.topic_exists(name):
        raise Http404(f"no topic {name}: create it first (the admin's Topics, or any publish from Python)")
    actor = f"user:{request.user.get_username()}"
    results = []
    for index, item in enumerate(items):
        try:
            payload, kwargs = publish_arguments(item)
            published = services.publish(name, payload, actor=actor, **kwargs)
            # outcome: published, or duplicate / throttled / debounced when a key was held.
            results.append({"index": index, "id": str(published), "outcome": published.outcome})
        except Unavailable:
            raise
        except NotReplicated as exc:   # it exists on the master: say which id, so a retry can be checked
            results.append({"index": index, "error": str(exc), "unconfirmed_id": exc.ids[0]})
        except TopicFull as exc:   # the budget (TopicConfig.max_messages / max_bytes) refused it: nothing written
            results.append({"index": index, "error": str(exc), "budget": _budget(exc)})
        except (ValueError, QueueError) as exc:   # BodyError is a ValueError
            results.append({"index": index, "error": str(exc)})
    ids = [r["id"] for r in results if "id" in r]
    failed = len(results) - len(ids)
    audit.record(request.user, "message.publish", topic=name, scope=_via(request), requested=len(items),
                 affected=len(ids), message_ids=ids, result="ok" if not failed else "partial" if ids else "failed",
                 detail="; ".join(f"#{r['index']}: {r['error']}" for r in results if "error" in r)[:2000])
    services.forget_summary(name)
    refused = [r for r in results if "id" not in r]
    full = bool(refused) and all("budget" in r for r in refused)
    # 507 Insufficient Storage: the topic is full, not the request wrong (429 would invite a retry soon);
    # only when the budget refused every message: any other refusal is the request's (400).
    status = 201 if not failed else 207 if ids else 507 if full else 400
    # published: new messages; accepted: every message with an id (a held key's answer included).
    new = sum(1 for r in results if r.get("outcome") == "published")
    answer = {"topic": name, "published": new, "accepted": len(ids), "failed": failed, "results": results}
    if single:
        answer.update(results[0])
    return JsonResponse(answer, status=status)
