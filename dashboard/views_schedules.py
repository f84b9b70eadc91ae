"""The Schedules page: every schedule with its expression in words, next fire times, counters and
last 20 ticks (each fired one linking to its message), and the actions pause (with a note),
resume, run now and delete: POST only, CSRF-protected, permission-checked, audited. A backfill of a
past range is previewed here and runs as a bulk operation (the Operations page)."""

import math
import secrets
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from . import audit, scopes, services
from .access import REDIS_DOWN, can, require, user_perms
from .actions import ScopeUsed, start_operation
from .operation_kinds import KINDS
from .services.contracts import DEFAULT_GROUP, InvalidArgument, QueueError, Unavailable, is_bridge_topic
from .views import render_region

# Which permission each action needs: stopping or removing a schedule is configuration (admin);
# running one now publishes a message (operator).
ACTION_PERMS = {"pause": "manage_topics", "resume": "manage_topics", "delete": "manage_topics",
                "run": "publish_message"}
# A Celery bridge topic's schedules come from the Celery app's beat_schedule, and its messages are
# signed tasks: the dashboard never publishes there (as the publish form), nor changes them.
BRIDGE_ACTIONS = ("pause", "resume")
BRIDGE_SCHEDULE_REFUSED = ("{name} fires Celery tasks on the bridge topic {topic}: its ticks are signed tasks that "
                           "only the Celery bridge publishes, and its timing comes from the Celery app's beat_schedule. "
                           "Pause and resume work here; run now, backfill, edit and delete do not.")
MAX_NOTE = 500
MAX_SEARCH = 200
PER_PAGE = 50
BULK_ACTIONS = ("pause", "resume")


@require("view_queue")
def schedules(request):
    """Every schedule, or those whose name or topic contains ``?q=``; htmx requests (actions,
    refresh) get the region only."""
    search = (request.GET.get("q") or request.POST.get("q") or "").strip()[:MAX_SEARCH]
    page_text = request.GET.get("page") or "1"
    if not (page_text.isascii() and page_text.isdigit()) or not 1 <= int(page_text) <= 100_000:
        return render(request, "delayq/error.html", {"status": 400, "text": f"page {page_text[:20]!r} is not a page "
                      "number (1 or more)"}, status=400)
    page = int(page_text)
    error, rows, total = None, [], 0
    try:
        total = services.matching_count(search)
        rows = services.schedules(search, page=page, per_page=PER_PAGE)
    except Unavailable as exc:
        error = REDIS_DOWN.format(exc)
    topic_url = reverse("delayq:topic", args=["-"])[:-2]   # one reverse() for every link: topics/<name>/...
    for row in rows:
        row["bridge"] = is_bridge_topic(row["topic"])     # run now, edit, backfill and delete are refused there
        for tick in row["ticks"]:
            tick["url"] = f"{topic_url}{row['topic']}/messages/{tick['message_id']}/" if tick["message_id"] else None
    return render_region(request, "delayq/schedules.html", "schedules",
                         {"schedules": rows, "redis_error": error, "perms": user_perms(request.user), "q": search,
                          "total": total, "page": page, "first": (page - 1) * PER_PAGE + 1,
                          "last": (page - 1) * PER_PAGE + len(rows),
                          "prev_query": urlencode({"q": search, "page": page - 1}) if page > 1 else None,
                          "next_query": urlencode({"q": search, "page": page + 1}) if page * PER_PAGE < total
                          else None})


@require_POST
@require("view_queue")
def schedule_action(request, name, action):
    """Pause, resume, run now or delete one schedule, then show the list again (htmx: the region
    and a toast; a plain form post: a redirect to the page)."""
    perm = ACTION_PERMS.get(action)
    if perm is None:
        return render(request, "delayq/error.html", {"status": 404, "text": f"No schedule action {action[:40]!r}: "
                      f"use one of {', '.join(ACTION_PERMS)}."}, status=404)
    if not can(request.user, perm):
        raise PermissionDenied(f"You need the '{perm}' permission for this.")
    note, refused = _note(request)
    if refused:
        return refused
    what = f"schedule.{action}"
    try:
        topic = services.schedule_topic(name)
    except (services.ScheduleNotFound, InvalidArgument) as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    if is_bridge_topic(topic) and action not in BRIDGE_ACTIONS:
        return _bridge_refusal(request, name, topic)
    try:
        said = services.act_on_schedule(name, action, note=note, actor=f"dashboard:{request.user.get_username()}")
    except (services.ScheduleNotFound, InvalidArgument, QueueError) as exc:
        audit.record(request.user, what, topic=topic, scope={"schedule": name}, requested=1, affected=0,
                     result="refused", detail=str(exc))
        messages.error(request, f"Nothing was changed: {exc}.")
    except Unavailable as exc:
        audit.record(request.user, what, topic=topic, scope={"schedule": name}, requested=1, affected=0,
                     result="error", detail=str(exc))
        messages.error(request, REDIS_DOWN.format(exc))
    else:
        audit.record(request.user, what, topic=topic, scope={"schedule": name, **({"note": note} if note else {})},
                     requested=1, affected=1, detail=said)
        messages.success(request, said)
    if not request.htmx:
        return redirect("delayq:schedules")
    return schedules(request)


def _bridge_refusal(request, name, topic):
    return render(request, "delayq/error.html",
                  {"status": 403, "text": BRIDGE_SCHEDULE_REFUSED.format(name=name, topic=topic)}, status=403)


def _note(request):
    """(the POSTed note, None) or (None, a 400 response saying why it was refused)."""
    note = request.POST.get("note", "").strip()
    if len(note) > MAX_NOTE:
        return None, render(request, "delayq/error.html", {"status": 400, "text": f"The note is {len(note)} "
                            f"characters long; keep it to {MAX_NOTE}."}, status=400)
    return note, None


@require_POST
@require("manage_topics")
def schedules_matching(request, action):
    """Pause (with a note) or resume every schedule matching the page's filter (``q``: all when
    empty); one audit entry names them."""
    if action not in BULK_ACTIONS:
        return render(request, "delayq/error.html", {"status": 404, "text": f"No bulk schedule action "
                      f"{action[:40]!r}: use pause or resume."}, status=404)
    note, refused = _note(request)
    if refused:
        return refused
    search = request.POST.get("q", "").strip()[:MAX_SEARCH]
    what = f"schedule.{action}_matching"
    scope = {"filter": search, **({"note": note} if note else {})}
    try:
        done, gone = services.act_on_matching(search, action, note=note,
                                              actor=f"dashboard:{request.user.get_username()}")
    except Unavailable as exc:
        audit.record(request.user, what, scope=scope, affected=0, result="error", detail=str(exc))
        messages.error(request, REDIS_DOWN.format(exc))
    else:
        audit.record(request.user, what, scope={**scope, "schedules": done[:100]}, requested=len(done) + len(gone),
                     affected=len(done), detail=f"gone meanwhile: {', '.join(gone)}" if gone else "")
        verb = "paused" if action == "pause" else "resumed"
        messages.success(request, f"{len(done)} schedule{'s' if len(done) != 1 else ''} {verb}"
                                  + (f" ({len(gone)} deleted meanwhile)" if gone else "") + ".")
    if not request.htmx:
        return redirect(f"{reverse('delayq:schedules')}?{urlencode({'q': search})}" if search
                        else reverse("delayq:schedules"))
    return schedules(request)


def _edit_form(post) -> tuple[dict, str | None]:
    """The edit form's fields from a POST, and the first problem a person can fix, naming its field."""
    fields = {k: post.get(k, "").strip() for k in ("timing", "cron", "every", "tz", "overlap", "catchup_window",
                                                   "jitter", "max_runs")}
    numbers = {"every": float, "catchup_window": float, "jitter": float, "max_runs": int}
    values: dict = {"cron": None, "every": None, "tz": fields["tz"] or "UTC", "overlap": fields["overlap"]}
    if fields["timing"] == "cron":
        values["cron"] = fields["cron"]
        numbers.pop("every")
    elif fields["timing"] == "every":
        values["every"] = fields["every"]
    else:
        return fields, "timing: choose cron or every"
    for name, kind in numbers.items():
        text = fields[name] or ("0" if name in ("jitter", "max_runs") else "")
        try:
            values[name] = kind(text)
        except ValueError:
            return fields, f"{name}: {text[:40]!r} is not a {'whole ' if kind is int else ''}number"
        if kind is float and not math.isfinite(values[name]):
            return fields, f"{name}: {text[:40]!r} is not a finite number of seconds"
    return values, None


@require("manage_topics")
def schedule_edit(request, name):
    """Change a schedule's timing and rules (not its payload); audited with the fields before and
    after. A bad field is a 400 with the form and what to fix."""
    try:
        current = services.editable(name)
    except (services.ScheduleNotFound, InvalidArgument) as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    if is_bridge_topic(current["topic"]):
        return _bridge_refusal(request, name, current["topic"])
    if request.method != "POST":
        return render(request, "delayq/schedule_edit.html", {"name": name, "form": current, "problem": None})
    values, problem = _edit_form(request.POST)
    if problem is None:
        try:
            before = services.edit_schedule(name, **values)
        except InvalidArgument as exc:
            problem = str(exc)
        except services.ScheduleNotFound as exc:
            return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
        else:
            after = {k: values[k] for k in values}
            audit.record(request.user, "schedule.edit", topic=current["topic"],
                         scope={"schedule": name, "before": {k: before[k] for k in after}, "after": after},
                         requested=1, affected=1)
            messages.success(request, f"Schedule {name} changed.")
            return redirect("delayq:schedules")
    shown = {**current, **{k: v for k, v in request.POST.items() if k in current or k == "timing"}}
    return render(request, "delayq/schedule_edit.html", {"name": name, "form": shown, "problem": problem},
                  status=400)


def _utc(text: str, what: str):
    """A datetime-local field read as UTC (the page shows UTC), or InvalidArgument naming it."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"{what}: {text[:40]!r} is not a date and time such as 2026-11-24T03:00") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


MAX_BACKFILL_RATE = 10_000   # ticks per second an operator may ask of a backfill


@transaction.non_atomic_requests
@require_http_methods(["GET", "POST"])
@require("publish_message")
def schedule_backfill(request, name):
    """Backfill a past range of a schedule's ticks, as a bulk operation. GET: the preview (how
    many ticks, the first five, the scope signed for this user). POST: confirm that scope, which
    starts a BulkOperation run by Celery with progress, cancel and resume on the Operations page;
    nothing is published in this request. Refused for Celery bridge topics (403)."""
    try:
        topic = services.schedule_topic(name)
    except (services.ScheduleNotFound, InvalidArgument) as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    if is_bridge_topic(topic):
        return _bridge_refusal(request, name, topic)
    kind = KINDS["backfill"]
    if request.method == "POST":
        return _start_backfill(request, name, topic, kind)
    start_text, end_text = request.GET.get("from", "").strip(), request.GET.get("to", "").strip()
    try:
        preview = services.backfill_preview(name, _utc(start_text, "from"), _utc(end_text, "to"))
    except services.ScheduleNotFound as exc:      # deleted a moment ago
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    except InvalidArgument as exc:
        return render(request, "delayq/error.html", {"status": 400, "text": f"Nothing was started: {exc}."},
                      status=400)
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return redirect("delayq:schedules")
    return render(request, "delayq/schedule_backfill.html", {
        "name": name, "topic": topic, **preview, "rate": kind.rate, "max_rate": MAX_BACKFILL_RATE,
        "scope_words": kind.words(topic, preview["scope"]),
        "scope_token": scopes.sign(topic, request.user, {**preview["scope"], "preview": secrets.token_hex(8)},
                                    kind="backfill")})


def _start_backfill(request, name, topic, kind):
    """The confirmation: the signed scope (this user's, unexpired, for this schedule). Its tick
    count holds while the schedule keeps the timing the scope recorded (fire times are a function
    of it), so it is checked, not counted again; a schedule moved or retimed since is refused."""
    try:
        scope = scopes.read(request.POST.get("scope", ""), topic, DEFAULT_GROUP, request.user, kind="backfill")
        rate = int(request.POST.get("rate_limit") or kind.rate)
    except scopes.ScopeInvalid as exc:
        return render(request, "delayq/error.html", {"status": 400, "text": str(exc)}, status=400)
    except ValueError:
        return render(request, "delayq/error.html", {"status": 400, "text": "rate_limit: give a whole number of "
                      f"ticks per second from 1 to {MAX_BACKFILL_RATE:,}"}, status=400)
    if not 1 <= rate <= MAX_BACKFILL_RATE:
        return render(request, "delayq/error.html", {"status": 400, "text": f"rate_limit: {rate} is not from 1 to "
                      f"{MAX_BACKFILL_RATE:,} ticks per second"}, status=400)
    if scope.get("schedule") != name:
        return render(request, "delayq/error.html", {"status": 400, "text": "this preview was made for another "
                      "schedule: open the preview again"}, status=400)
    scope = {k: v for k, v in scope.items() if k != "group"}
    try:
        retimed = not services.backfill_scope_holds(name, topic, scope)
    except services.ScheduleNotFound as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return redirect("delayq:schedules")
    if retimed:
        return render(request, "delayq/error.html", {"status": 409, "text": f"Schedule {name} was moved or retimed "
                      "since the preview, so the range holds other ticks: open the preview again."}, status=409)
    try:
        op = start_operation(request, topic, DEFAULT_GROUP, kind, scope, scope["ticks"], rate,
                             token=request.POST.get("scope", ""))
    except ScopeUsed as exc:   # a double click: the first operation runs; a second would publish again
        if exc.op is not None:
            messages.info(request, f"{exc}; here it is.")
            return redirect("delayq:operation", op_id=exc.op.pk)
        return render(request, "delayq/error.html", {"status": 409, "text": str(exc)}, status=409)
    if op is None:
        return redirect("delayq:schedules")
    messages.success(request, f"Backfill operation #{op.pk} started: {kind.words(topic, scope)}, at up to "
                              f"{rate}/s.")
    return redirect("delayq:operation", op_id=op.pk)


