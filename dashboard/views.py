"""Pages (GET). Access helpers in access.py; Redis only through services/; actions in actions.py.

htmx requests get the region they asked for (``page.html#region``); plain requests the full page.
"""

from dataclasses import replace
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

from . import action_table, audit, celery_tasks, charts, finding, operation_kinds, services
from .access import REDIS_DOWN, can, require, user_perms
from .message_view import message_view
from .models import AlertEvent, AlertRule, AuditEntry, BulkOperation, Topic
from .redaction import Redactor, redact_payload
from .services.contracts import (
    DEFAULT_GROUP,
    InvalidArgument,
    InvalidTopic,
    MessageState,
    Unavailable,
    format_seconds,
    is_bridge_topic,
    validate_group,
    validate_topic,
)
from .services.memory import budget_badge, budget_badges
from .services.undo import undoable

# The overview lists this many topics a page: each listed topic costs a few cached round trips
# and a table row, so the page's cost is bounded whatever the number of topics (100 a page took
# ~230 ms here, 50 stay under the 150 ms budget; bench.dashboard).
OVERVIEW_PAGE_SIZE = 50
SCORE_LABEL = {"pending": "due", "ready": "due", "retrying": "next attempt", "unacked": "lease until",
               "dead": "died"}
# A topic opens on the first of these tabs that holds anything: the problems first.
OPENING_TABS = ("dead", "retrying", "ready", "pending")
# The dead tab answers "what broke just now?", the others "what is due next?".
NEWEST_FIRST_TABS = ("dead",)
SORTS = ("newest", "oldest")


def topic_name(name: str) -> str:
    try:
        return validate_topic(name)
    except InvalidTopic:
        raise Http404("no such topic") from None


def group_name(name: str, group: str | None) -> str:
    """The consumer group a URL names, if the topic has it; Http404 naming the groups it has.
    No group in the URL means the default group (or the first group, where the default was
    deleted)."""
    groups = services.groups(name)
    if group is None:
        return DEFAULT_GROUP if DEFAULT_GROUP in groups or not groups else groups[0]
    try:
        validate_group(group)
    except InvalidArgument:
        raise Http404("no such consumer group") from None
    if group not in groups:
        groups = services.groups(name, fresh=True)   # added in the last seconds?
    if group not in groups:
        raise Http404(f"{name} has no consumer group {group!r}; its groups are {', '.join(groups) or 'none'}")
    return group


def parse_partition(value: str | None, partitions: int) -> int | None:
    """The partition filter (?p=N): None for all partitions, or when out of range."""
    try:
        p = int(value) if value not in (None, "") else None
    except ValueError:
        return None
    return p if p is not None and 0 <= p < partitions else None


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
    """Topics with totals over their groups, OVERVIEW_PAGE_SIZE a page, filtered by the search box;
    a topic with several groups expands (``?open=<topic>``, kept by the poll) to one row per
    group. htmx polls ask only for the summary region, with the same search, page and open rows."""
    search = request.GET.get("q", "").strip()[:200]
    opened = set(request.GET.getlist("open")[:OVERVIEW_PAGE_SIZE])
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        page = 1
    error, topics, matching, budgets = None, [], 0, {}
    try:
        topics, matching = services.topic_summaries(search, (page - 1) * OVERVIEW_PAGE_SIZE, OVERVIEW_PAGE_SIZE)
        budgets = budget_badges([row["name"] for row in topics])
    except Unavailable as exc:
        error = REDIS_DOWN.format(exc)
    pages = max(1, -(-matching // OVERVIEW_PAGE_SIZE))

    def page_url(number, open_names=opened):
        return "?" + urlencode({**({"q": search} if search else {}), "page": number,
                                "open": sorted(open_names)}, doseq=True)
    for row in topics:
        # One reverse() a row; the state and adopt links extend it (topics/<name>/<state>/,
        # topics/<name>/adopt/, topics/<name>/<group>/<state>/). Seven {% url %} tags a row
        # were a third of the page's time.
        row["url"] = reverse("delayq:topic", args=[row["name"]])
        row["open"] = row["name"] in opened
        row["budget"] = budgets.get(row["name"])
        if len(row["groups"]) > 1:
            row["toggle_url"] = page_url(page, opened ^ {row["name"]})
    return render_region(request, "delayq/overview.html", "summary", {
        # Alerts: those firing now, and the last starts and ends (the admin holds the rules).
        "alerts_firing": AlertRule.objects.filter(enabled=True, firing_since__isnull=False).select_related("topic"),
        "alert_history": AlertEvent.objects.select_related("rule__topic")[:10],
        "topics": topics, "redis_error": error, "perms": user_perms(request.user), "search": search,
        "matching": matching, "page": page, "pages": pages, "first_shown": (page - 1) * OVERVIEW_PAGE_SIZE + 1,
        "last_shown": (page - 1) * OVERVIEW_PAGE_SIZE + len(topics), "this_page_url": page_url(page),
        "previous_url": page_url(page - 1, set()) if page > 1 else None,
        "next_url": page_url(page + 1, set()) if page < pages else None})


def opening_state(counts: dict) -> str:
    """The tab a topic opens on when the URL names none (OPENING_TABS)."""
    return next((s for s in OPENING_TABS if counts.get(s)), "ready")


def parse_sort(value: str | None, state: MessageState) -> bool | None:
    """Whether the tab lists newest first (``?sort=newest|oldest``; by default only the dead tab
    does); None for a value that is neither."""
    if not value:
        return state.value in NEWEST_FIRST_TABS
    return value == "newest" if value in SORTS else None


@require("view_queue")
def topic_detail(request, name, state=None, group=None):
    """The topic page of one consumer group: summary cards, the group switcher, its configuration,
    one tab per state (with its count) with cursor pagination, and a partition filter on topics
    with several. Without a state in the URL it opens on the first tab with a problem in it."""
    name = topic_name(name)
    if state is not None:
        state = parse_state(state)
    topic = Topic.objects.select_related("retry_policy").filter(name=name).first()
    if topic is None and not services.topic_exists(name):
        raise Http404("no such topic")
    group = group_name(name, group)
    filters = {"q": request.GET.get("q", "").strip(), "fp": request.GET.get("fp", "").strip(),
               "from": request.GET.get("from", ""), "to": request.GET.get("to", ""),
               "p": request.GET.get("p", "").strip()}
    config = services.topic_config(name)
    gconfig = services.group_config(name, group)
    partition = parse_partition(filters["p"], config.partitions)
    if partition is None:
        filters["p"] = ""
    group_names = services.groups(name) or [DEFAULT_GROUP]
    if group not in group_names:            # added seconds ago: the cached layout lags
        group_names.append(group)
    summaries = services.group_summaries([(name, g) for g in group_names])
    summary = summaries[(name, group)]
    if state is None:
        state = MessageState(opening_state(summary["counts"]))
    newest_first = parse_sort(request.GET.get("sort"), state)
    if newest_first is None:
        return render(request, "delayq/error.html", {"status": 400, "text": (
            f"Unknown sort {request.GET['sort'][:40]!r}: use sort=newest or sort=oldest, or leave it out for "
            "the tab's default order.")}, status=400)
    rules = services.redaction_rules(name)
    query_error, status = "", 200
    try:
        messages, next_cursor, scan = finding.state_messages(
            name, state, filters["q"], after=request.GET.get("after") or None,
            since_ms=parse_time(filters["from"]), until_ms=parse_time(filters["to"]), fingerprint=filters["fp"],
            group=group, partition=partition, newest_first=newest_first)
    except finding.QueryError as exc:       # said beside the box, which keeps what was typed
        messages, next_cursor, scan, query_error, status = [], None, None, str(exc), 400
    error_groups = services.error_groups(name, limit=50, group=group) if state is MessageState.dead else []
    if error_groups:
        # A sample error text is free text from a handler: card numbers and key=value secrets in it
        # are masked as on a message's page (the payload's own values are masked there, not here).
        scrub = Redactor(rules).text
        error_groups = [replace(g, sample_message=scrub(g.sample_message)) for g in error_groups]
    # Topics of Celery tasks scheduled through delayq (queue_core.contrib.celery_bridge) get a task column.
    celery_topic = is_bridge_topic(name)
    rows = [{**message_view(m, request.user, rules),
             "score": services.score_ms(m, state) if not m.corrupt else None,
             "limit": m.max_attempts or gconfig.retry.max_attempts,
             "task": (m.headers or {}).get("task") if celery_topic and not m.corrupt else None} for m in messages]
    perms = user_perms(request.user)
    managed_group = topic.groups.filter(name=group).select_related("retry_policy").first() if topic else None
    context = {
        "name": name, "topic": topic, "group": group, "config": config, "gconfig": gconfig,
        "celery_topic": celery_topic,
        "managed_group": managed_group, "preview": gconfig.retry.describe(),
        "ttl_words": format_seconds(gconfig.ttl) if gconfig.ttl else "",
        "group_tabs": [{"name": g, "total": sum(summaries[(name, g)]["counts"].values()),
                        "paused": summaries[(name, g)]["paused"]} for g in group_names],
        "partitions": range(config.partitions), "partition": partition,
        "summary": summary, "counts": list(summary["counts"].items()), "state": state.value,
        # Called by the template only where drawn (the page and its counts region), not for a tab's fragment.
        "minute_charts": lambda: charts.minute_charts(services.minute_series(name, group),
                                                      services.lateness_causes(name, group)),
        "dispatch": lambda: dispatch_view(name, group, summary),
        "budget": lambda: budget_badge(name),
        "states": [(s.value, summary["counts"].get(s.value, 0)) for s in MessageState], "rows": rows,
        "next_cursor": next_cursor, "sort_param": request.GET.get("sort", ""),
        "sort_choices": [{"name": s, "words": f"{s} first", "current": newest_first is (s == "newest"),
                          "query": urlencode({**{k: v for k, v in filters.items() if v}, "sort": s})} for s in SORTS],
        "filters": filters, "groups": error_groups, "score_label": SCORE_LABEL[state.value],
        "perms": perms, "filtered": any(filters.values()),
        "actions": action_table.available(state, perms),
        "may_purge": action_table.may("purge", state, perms),
        # Reversed once: each row's action buttons post here (two {% url %} tags per button and
        # row were most of the dead tab's render time).
        "action_url": reverse("delayq:message_action", args=[name, group, state.value]),
        "message_url": reverse("delayq:message", args=[name, group, "-"])[:-2],
        "scan": scan, "query_error": query_error, "query_example": finding.QUERY_EXAMPLE,
        "matching_actions": operation_kinds.matching_available(state, perms) if scan else [],
        "matching_params": [(k, v) for k, v in filters.items() if v],
        # A query's pages carry it (the cursor continues its scan); an id or key names one message.
        "pager_query": urlencode({**{k: v for k, v in filters.items() if v and (k != "q" or scan)},
                                  **({"sort": request.GET["sort"]} if request.GET.get("sort") else {})}),
    }
    region = request.GET.get("region", "messages")
    if region not in ("messages", "counts"):
        region = "messages"
    return render_region(request, "delayq/topic.html", region, context, status=status)


def dispatch_view(name: str, group: str, summary: dict) -> dict:
    """What the topic page says of dispatch control: the limits in words, the current rate, what
    is held back and why, the fairness keys with the largest backlog."""
    d = services.dispatch_state(name, group)

    def in_words(counts: dict) -> list[tuple[str, int]]:
        return [(services.HELD_REASONS.get(r, r), n) for r, n in sorted(counts.items(), key=lambda rn: -rn[1]) if n]
    return {"limits": d.limits, "limited": d.config.limited, "ready": d.ready, "in_flight": d.in_flight,
            "held_back": d.held_back, "reasons": in_words(d.reasons), "throttled": in_words(d.throttled),
            "keys": [(key, n) for key, n in d.keys if n], "keys_sampled": d.keys_sampled,
            "per_second": summary.get("acked_last_minute", 0) / 60}


# A 1 MB payload would make a 1 MB page: show this much, with the size, "show all" and the
# downloads for the rest. (Tracebacks need no cut: the engine keeps their last 8 KiB.)
PAGE_TEXT_CHARS = 64 * 1024


def _clip(text: str, show_all: bool) -> tuple[str, int]:
    """(what the page shows, how many characters it leaves out)."""
    if show_all or len(text) <= PAGE_TEXT_CHARS:
        return text, 0
    return text[:PAGE_TEXT_CHARS], len(text) - PAGE_TEXT_CHARS


def _journal_region(request, name, msg_id, group):
    """The message page's progress and log (htmx polls it every 0.5 s while the message is
    unacked, so a report shows within about 1 s of the handler's call): two round trips, redacted like the page; once the message is gone or no longer
    unacked the region comes back without its poll."""
    message = services.get_message(name, msg_id, group)
    if message is None:
        return render(request, "delayq/message.html#journal", {"gone": True, "name": name, "group": group})
    view = message_view(message, request.user, services.redaction_rules(name),
                        journal=services.journal(name, msg_id, group))
    return render(request, "delayq/message.html#journal", {**view, "name": name, "group": group,
                                                            "state": message.state.value if message.state else ""})


def _message_page(request, name, msg_id, group, *, reveal: bool):
    name = topic_name(name)
    group = group_name(name, group)
    if request.htmx and request.GET.get("region") == "journal" and not reveal:
        return _journal_region(request, name, msg_id, group)
    message = services.get_message(name, msg_id, group)
    if message is None:
        raise Http404(f"This message is gone from group {group}: acked, cancelled, deleted or evicted.")
    gconfig = services.group_config(name, group)
    policy = gconfig.retry
    next_attempt = services.next_attempt_preview(policy, message) if not message.corrupt else ""
    if reveal:
        audit.record(request.user, "payload.reveal", topic=name, group=group, message_ids=[msg_id], requested=1,
                     affected=1)
    view = message_view(message, request.user, services.redaction_rules(name), reveal=reveal, with_history=True,
                        journal=services.journal(name, msg_id, group))
    # Only a ready message can be held back by a limit (a read of a few round trips).
    held = services.held_reason(name, msg_id, group) if message.state is MessageState.ready else None
    show_all = request.GET.get("all") == "1"
    payload_shown, payload_left_out = _clip(view["payload"]["text"], show_all)
    perms = user_perms(request.user)
    return render(request, "delayq/message.html", {
        **view, "name": name, "group": group, "gconfig": gconfig, "next_attempt": next_attempt,
        "payload_shown": payload_shown, "payload_left_out": payload_left_out, "held_reason": held,
        "shown_chars": PAGE_TEXT_CHARS, "ttl": message.ttl or gconfig.ttl or None,
        "perms": perms, "limit": message.max_attempts or policy.max_attempts,
        "state": message.state.value if message.state else "",
        "actions": action_table.available(message.state, perms) if message.state else [],
        # A Celery bridge record is signed: an edited one would never run (actions.edit_and_replay).
        "may_edit": bool(message.state) and not is_bridge_topic(name)
        and action_table.may("edit_replay", message.state, perms),
        "may_reveal": action_table.may("reveal", None, perms),
        "batch": services.batch_of(name, msg_id),
    })


@require("view_queue")
def message_detail(request, name, msg_id, group=None):
    """Redacted for everyone: revealing is a POST (reveal_message), never a link."""
    return _message_page(request, name, msg_id, group, reveal=False)


@require_POST
@require("view_payload")
def reveal_message(request, name, msg_id, group=None):
    """The full payload, headers and error texts of one message, audited."""
    return _message_page(request, name, msg_id, group, reveal=True)


@require("view_queue")
def message_payload(request, name, msg_id, group=None):
    """Download the payload. GET: the redacted text, for everyone, with no side effect. POST (with
    view_payload, CSRF-checked): the raw bytes, audited."""
    name = topic_name(name)
    group = group_name(name, group)
    message = services.get_message(name, msg_id, group)
    if message is None:
        raise Http404("This message is gone.")
    if request.method == "POST":
        if not can(request.user, "view_payload"):
            raise PermissionDenied("You need the 'view_payload' permission for this.")
        audit.record(request.user, "payload.download", topic=name, group=group, message_ids=[msg_id], requested=1,
                     affected=1)
        body, ctype = message.payload, "application/octet-stream"
    else:
        shown = celery_tasks.for_display(message.payload)    # a Celery task's arguments, decoded
        body, ctype = redact_payload(shown, services.redaction_rules(name))[0].encode(), "text/plain"
    response = HttpResponse(body, content_type=ctype)
    response["Content-Disposition"] = f'attachment; filename="{name}-{msg_id}.payload"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require("view_queue")
def batch_detail(request, name, batch_id):
    """A batch (q.batch()): its counts, ETA and callbacks in each group."""
    name = topic_name(name)
    try:
        found = services.batch_view(name, services.batch_id(batch_id))
    except services.UnknownBatch as exc:
        raise Http404(str(exc)) from None
    if found is None:
        raise Http404(f"Topic {name} has no batch {batch_id}.")
    status, groups = found
    return render(request, "delayq/batch.html", {"name": name, "status": status, "groups": groups,
                                                 **services.batch_times(status), "perms": user_perms(request.user)})


@require("view_queue")
def operations(request):
    ops = list(BulkOperation.objects.select_related("created_by", "cancelled_by")[:100])
    try:
        undo = undoable([op for op in ops if op.kind.holds])
    except Unavailable:   # the list is the database's: it stays readable with Redis down
        undo = {}
    for op in ops:
        op.undoable, op.may_act = undo.get(op.pk), can(request.user, op.permission)
    return render(request, "delayq/operations.html", {"ops": ops, "perms": user_perms(request.user)})


@require("view_queue")
def operation_detail(request, op_id):
    op = get_object_or_404(BulkOperation, pk=op_id)
    context = {"op": op, "perms": user_perms(request.user), "may_act": can(request.user, op.permission),
               "words": op.words, "undoable": None, "undo_unavailable": False}
    if op.kind.holds:
        try:
            context["undoable"] = undoable([op]).get(op.pk)
        except Unavailable:   # the page is the database's otherwise: it stays readable with Redis down
            context["undo_unavailable"] = True
    return render_region(request, "delayq/operation.html", "operation", context)


@require("view_queue")
def audit_log(request):
    entries = AuditEntry.objects.all()
    filters = {k: request.GET.get(k, "").strip() for k in ("action", "topic", "group", "user")}
    if filters["action"]:
        entries = entries.filter(action__startswith=filters["action"])
    if filters["topic"]:
        entries = entries.filter(topic=filters["topic"])
    if filters["group"]:
        entries = entries.filter(group=filters["group"])
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
    audit.record(request.user, "audit.reveal", topic=entry.topic, group=entry.group, message_ids=entry.message_ids,
                 detail=f"full details of audit entry #{entry.pk} ({entry.action})")
    return render(request, "delayq/audit_reveal.html", {"entry": entry, "perms": user_perms(request.user)})
