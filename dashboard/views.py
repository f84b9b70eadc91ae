"""Pages (GET). Access helpers in access.py; Redis only through services/; actions in actions.py.

htmx requests get the region they asked for (``page.html#region``); plain requests the full page.
"""

from datetime import UTC, datetime
from urllib.parse import urlencode

from django.contrib.messages import get_messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST

from . import action_table, audit, services
from .access import REDIS_DOWN, can, require, user_perms
from .message_view import message_view
from .models import AuditEntry, BulkOperation, Topic
from .redaction import redact_payload
from .services.contracts import InvalidTopic, MessageState, Unavailable, validate_topic

# The overview lists this many topics a page: each listed topic costs a few cached round trips
# and a table row, so the page's cost is bounded whatever the number of topics (100 a page took
# ~230 ms here, 50 stay under the 150 ms budget; bench.dashboard).
OVERVIEW_PAGE_SIZE = 50
SCORE_LABEL = {"pending": "due", "ready": "due", "retrying": "next attempt", "unacked": "lease until",
               "dead": "died"}


def topic_name(name: str) -> str:
    try:
        return validate_topic(name)
    except InvalidTopic:
        raise Http404("no such topic") from None


def parse_state(state: str) -> MessageState:
    try:
        return MessageState(state)
    except ValueError:
        raise Http404(f"no such state {state!r}: one of {', '.join(s.value for s in MessageState)}") from None


def parse_time(value: str | None) -> int | None:
    """A datetime-local or ISO value (UTC unless it says otherwise) -> epoch ms; None when empty."""
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def render_region(request, template: str, region: str, context: dict, status: int = 200):
    """The whole page, or for htmx only ``region``, plus any pending messages ("Replayed 1 message")
    swapped into the page's messages area out of band: a fragment has no messages area of its own."""
    if not request.htmx:
        return render(request, template, context, status=status)
    response = render(request, f"{template}#{region}", context, status=status)
    pending = list(get_messages(request))
    if pending:
        oob = render_to_string("delayq/messages.html", {"messages": pending, "oob": True}, request)
        response.content += oob.encode(response.charset)
    return response


@require("view_queue")
def overview(request):
    """Topics with counts, throughput and liveness, OVERVIEW_PAGE_SIZE a page, filtered by the
    search box. htmx polls ask only for the summary region, with the same search and page."""
    search = request.GET.get("q", "").strip()[:200]
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    error, topics, matching = None, [], 0
    try:
        topics, matching = services.topic_summaries(search, (page - 1) * OVERVIEW_PAGE_SIZE, OVERVIEW_PAGE_SIZE)
    except Unavailable as exc:
        error = REDIS_DOWN.format(exc)
    pages = max(1, -(-matching // OVERVIEW_PAGE_SIZE))
    for row in topics:
        # One reverse() a row; the state and adopt links extend it (topics/<name>/<state>/,
        # topics/<name>/adopt/). Seven {% url %} tags a row were a third of the page's time.
        row["url"] = reverse("delayq:topic", args=[row["name"]])

    def page_url(number):
        return "?" + urlencode({**({"q": search} if search else {}), "page": number})
    return render_region(request, "delayq/overview.html", "summary", {
        "topics": topics, "redis_error": error, "perms": user_perms(request.user), "search": search,
        "matching": matching, "page": page, "pages": pages, "first_shown": (page - 1) * OVERVIEW_PAGE_SIZE + 1,
        "last_shown": (page - 1) * OVERVIEW_PAGE_SIZE + len(topics), "this_page_url": page_url(page),
        "previous_url": page_url(page - 1) if page > 1 else None,
        "next_url": page_url(page + 1) if page < pages else None})


@require("view_queue")
def topic_detail(request, name, state="ready"):
    """The topic page: summary cards, configuration, one tab per state with cursor pagination."""
    name = topic_name(name)
    state = parse_state(state)
    topic = Topic.objects.select_related("retry_policy").filter(name=name).first()
    filters = {"q": request.GET.get("q", "").strip(), "fp": request.GET.get("fp", "").strip(),
               "from": request.GET.get("from", ""), "to": request.GET.get("to", "")}
    if topic is None and not services.topic_exists(name):
        raise Http404("no such topic")
    summary = services.topic_summary(name)
    config = topic.engine_config() if topic else services.topic_config(name)
    messages, next_cursor = services.message_page(
        name, state, after=request.GET.get("after") or None, search=filters["q"],
        since_ms=parse_time(filters["from"]), until_ms=parse_time(filters["to"]), fingerprint=filters["fp"])
    groups = services.error_groups(name, limit=50) if state is MessageState.dead else []
    rules = list(topic.redaction_rules) if topic else []
    rows = [{**message_view(m, request.user, rules),
             "score": services.score_ms(m, state) if not m.corrupt else None} for m in messages]
    context = {
        "name": name, "topic": topic, "config": config, "preview": config.retry.describe(),
        "summary": summary, "counts": list(summary["counts"].items()), "state": state.value,
        "states": [s.value for s in MessageState], "rows": rows, "next_cursor": next_cursor,
        "filters": filters, "groups": groups, "score_label": SCORE_LABEL[state.value],
        "perms": user_perms(request.user), "filtered": any(filters.values()),
        "actions": action_table.available(state, user_perms(request.user)),
        "may_purge": action_table.may("purge", state, user_perms(request.user)),
        # Reversed once: each row's action buttons post here (two {% url %} tags per button and
        # row were most of the dead tab's render time).
        "action_url": reverse("delayq:message_action", args=[name, state.value]),
    }
    region = request.GET.get("region", "messages")
    if region not in ("messages", "counts"):
        region = "messages"
    return render_region(request, "delayq/topic.html", region, context)


# A 1 MB payload would make a 1 MB page: show this much, with the size, "show all" and the
# downloads for the rest. (Tracebacks need no cut: the engine keeps their last 8 KiB.)
PAGE_TEXT_CHARS = 64 * 1024


def _clip(text: str, show_all: bool) -> tuple[str, int]:
    """(what the page shows, how many characters it leaves out)."""
    if show_all or len(text) <= PAGE_TEXT_CHARS:
        return text, 0
    return text[:PAGE_TEXT_CHARS], len(text) - PAGE_TEXT_CHARS


def _message_page(request, name, msg_id, *, reveal: bool):
    name = topic_name(name)
    message = services.get_message(name, msg_id)
    if message is None:
        raise Http404("This message is gone: acked, cancelled, deleted or evicted.")
    policy = services.topic_config(name).retry
    next_attempt = services.next_attempt_preview(policy, message) if not message.corrupt else ""
    if reveal:
        audit.record(request.user, "payload.reveal", topic=name, message_ids=[msg_id], requested=1, affected=1)
    view = message_view(message, request.user, services.redaction_rules(name), reveal=reveal, with_history=True)
    show_all = request.GET.get("all") == "1"
    payload_shown, payload_left_out = _clip(view["payload"]["text"], show_all)
    return render(request, "delayq/message.html", {
        **view, "name": name, "next_attempt": next_attempt,
        "payload_shown": payload_shown, "payload_left_out": payload_left_out,
        "shown_chars": PAGE_TEXT_CHARS,
        "perms": user_perms(request.user), "limit": message.max_attempts or policy.max_attempts,
        "state": message.state.value if message.state else "",
        "actions": action_table.available(message.state, user_perms(request.user)) if message.state else [],
        "may_edit": action_table.may("edit_replay", message.state, user_perms(request.user)) if message.state else False,
        "may_reveal": action_table.may("reveal", None, user_perms(request.user)),
    })


@require("view_queue")
def message_detail(request, name, msg_id):
    """Redacted for everyone: revealing is a POST (reveal_message), never a link."""
    return _message_page(request, name, msg_id, reveal=False)


@require_POST
@require("view_payload")
def reveal_message(request, name, msg_id):
    """The full payload, headers and error texts of one message, audited."""
    return _message_page(request, name, msg_id, reveal=True)


@require("view_queue")
def message_payload(request, name, msg_id):
    """Download the payload. GET: the redacted text, for everyone, with no side effect. POST (with
    view_payload, CSRF-checked): the raw bytes, audited."""
    name = topic_name(name)
    message = services.get_message(name, msg_id)
    if message is None:
        raise Http404("This message is gone.")
    if request.method == "POST":
        if not can(request.user, "view_payload"):
            raise PermissionDenied("You need the 'view_payload' permission for this.")
        audit.record(request.user, "payload.download", topic=name, message_ids=[msg_id], requested=1, affected=1)
        body, ctype = message.payload, "application/octet-stream"
    else:
        body, ctype = redact_payload(message.payload, services.redaction_rules(name))[0].encode(), "text/plain"
    response = HttpResponse(body, content_type=ctype)
    response["Content-Disposition"] = f'attachment; filename="{name}-{msg_id}.payload"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require("view_queue")
def operations(request):
    ops = BulkOperation.objects.select_related("created_by", "cancelled_by")[:100]
    return render(request, "delayq/operations.html", {"ops": ops, "perms": user_perms(request.user)})


@require("view_queue")
def operation_detail(request, op_id):
    op = get_object_or_404(BulkOperation, pk=op_id)
    context = {"op": op, "perms": user_perms(request.user),
               "words": services.replay_scope_words(op.topic, op.scope) if op.action == "replay" else
               f"every {op.scope.get('state')} message of {op.topic}"}
    return render_region(request, "delayq/operation.html", "operation", context)


@require("view_queue")
def audit_log(request):
    entries = AuditEntry.objects.all()
    filters = {k: request.GET.get(k, "").strip() for k in ("action", "topic", "user")}
    if filters["action"]:
        entries = entries.filter(action__startswith=filters["action"])
    if filters["topic"]:
        entries = entries.filter(topic=filters["topic"])
    if filters["user"]:
        entries = entries.filter(username=filters["user"])
    page = Paginator(entries, 50).get_page(request.GET.get("page"))
    actions = AuditEntry.objects.order_by().values_list("action", flat=True).distinct()
    return render_region(request, "delayq/audit.html", "entries",
                         {"page": page, "filters": filters, "actions": sorted(set(actions)),
                          "perms": user_perms(request.user)})


@require_POST
@require("view_payload")
def audit_reveal(request, entry_id):
    """An entry's unredacted details (an edit's full diff), for view_payload holders; audited."""
    entry = get_object_or_404(AuditEntry, pk=entry_id)
    if not entry.private:
        raise Http404("this entry has nothing more to show")
    audit.record(request.user, "audit.reveal", topic=entry.topic, message_ids=entry.message_ids,
                 detail=f"full details of audit entry #{entry.pk} ({entry.action})")
    return render(request, "delayq/audit_reveal.html", {"entry": entry, "perms": user_perms(request.user)})
