"""Operator actions (POST only, CSRF-protected, permission-checked, audited).

Every action is compare-and-set on the state the operator saw: the tab's state travels with the
request and the engine moves a message only if it is still there, so a double click or two
operators at once never act twice. htmx requests get the refreshed region back (and a
``counts-changed`` event); plain requests are redirected (post/redirect/get).
"""

import difflib
import hashlib
import json

from django.contrib import messages
from django.contrib.messages import get_messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from . import action_table, audit, background, canary, celery_tasks, jsontext, scopes, services
from .access import can, require, user_perms
from .canary import words as canary_words
from .message_view import message_view
from .models import BulkOperation, Topic
from .operation_kinds import KINDS, OperationKind
from .redaction import Redactor
from .services.contracts import (
    InvalidArgument,
    MessageState,
    NotReplicated,
    PayloadTooLarge,
    QueueError,
    StateConflict,
    Unavailable,
    is_bridge_topic,
)
from .services.publishing import due_time_problem
from .services.undo import undo_token
from .tasks import STALL_AFTER, run_bulk_operation
from .views import REDIS_DOWN, group_name, parse_state, parse_time, render_region, topic_detail, topic_name

MAX_IDS = 500

# How each failure an action can meet is audited and told, in one place so the audit's result and
# the operator's message cannot disagree: (exception, audit result, message level, its words).
FAILURES = (
    # The change happened on the master; only the replicas' acknowledgement is missing.
    (NotReplicated, "unconfirmed", messages.warning, lambda exc: f"{exc}."),
    (InvalidArgument, "refused", messages.error, lambda exc: f"Nothing was changed: {exc}."),
    (Unavailable, "error", messages.error, REDIS_DOWN.format),
    (background.BrokerUnavailable, "failed", messages.error, str),
)


def _audited_failure(request, exc: Exception, what: str, *, say: str = "", **entry) -> None:
    """Record ``what`` as failed with ``exc`` in the audit log (``entry``: audit.record's fields;
    the detail is the error unless given) and tell the operator, in ``say`` or the failure's words."""
    result, show, words = next((result, show, words) for failure, result, show, words in FAILURES
                               if isinstance(exc, failure))
    audit.record(request.user, what, result=result, **{"detail": str(exc), **entry})
    show(request, say or words(exc))


def _back(request, name, group, state):
    url = reverse("delayq:topic_state", args=[name, group, state.value])
    query = request.POST.get("return_query", "")
    return redirect(f"{url}?{query}" if query else url)


def _refreshed(request, name, group, state):
    """For htmx: the messages region as it is now, plus an event that refreshes the counters.
    Renders the tab's GET view for this request (the POST is done; nothing reads its body again)."""
    request.GET = request.GET.copy()
    request.method = "GET"
    response = topic_detail(request, name, state.value, group)
    response["HX-Trigger"] = "counts-changed"
    return response


@require_POST
@require("view_queue")
def message_action(request, name, state, group=None):
    name = topic_name(name)
    state = parse_state(state)
    group = group_name(name, group)
    action = action_table.ACTIONS.get(request.POST.get("action", ""))
    if action is None or not action.row:
        return HttpResponseBadRequest("unknown action")
    if not can(request.user, action.perm):
        raise PermissionDenied(f"You need the '{action.perm}' permission for this.")
    if not action.applies(state):
        return HttpResponseBadRequest(f"{action.name} does not apply to {state.value} messages")
    one = request.POST.get("one") or request.GET.get("one")  # a row's own button (htmx: hx-vals; no JS: formaction)
    ids = [one] if one else request.POST.getlist("ids")
    ids = [i for i in dict.fromkeys(ids) if i][:MAX_IDS]
    if not ids:
        messages.warning(request, "Select at least one message.")
        return _refreshed(request, name, group, state) if request.htmx else _back(request, name, group, state)
    at_ms = parse_time(request.POST.get("reschedule_at")) if action.needs_time else None
    if action.needs_time and at_ms is None:
        messages.warning(request, f"Give the new due time (UTC) to {action.label.lower()} messages.")
        return _refreshed(request, name, group, state) if request.htmx else _back(request, name, group, state)
    if at_ms is not None and (problem := due_time_problem(at_ms)):
        messages.error(request, f"Nothing was changed: the new due time {problem}.")
        return _refreshed(request, name, group, state) if request.htmx else _back(request, name, group, state)
    try:
        done = services.act(action.name, name, ids, state, actor=f"user:{request.user.get_username()}",
                            group=group, at_ms=at_ms)
    except (InvalidArgument, Unavailable, NotReplicated) as exc:
        _audited_failure(request, exc, action.audit, topic=name, group=group, requested=len(ids), message_ids=ids,
                         affected=len(exc.ids) if isinstance(exc, NotReplicated) else 0)
        return _refreshed(request, name, group, state) if request.htmx else _back(request, name, group, state)
    skipped = len(ids) - done
    scope = {"state": state.value, **({"due_ms": at_ms} if at_ms is not None else {})}
    audit.record(request.user, action.audit, topic=name, group=group, scope=scope, requested=len(ids),
                 affected=done, message_ids=ids, result="ok" if not skipped else "partial",
                 detail=f"{skipped} skipped: no longer {state.value}" if skipped else "")
    text = f"{action.done} {done} message{'s' if done != 1 else ''} of group {group}"
    if skipped:
        text += f"; {skipped} skipped because {'it was' if skipped == 1 else 'they were'} no longer {state.value}"
    (messages.success if not skipped else messages.warning)(request, text + ".")
    services.forget_summary(name, group)
    return _refreshed(request, name, group, state) if request.htmx else _back(request, name, group, state)


@transaction.non_atomic_requests
@require("replay_message")
def replay_all(request, name, group=None):
    """GET: preview of "replay all matching" in one group (count, samples, scope in words). POST:
    confirm, which creates a BulkOperation run by Celery; nothing bulk happens in this request."""
    name = topic_name(name)
    group = group_name(name, group)
    fp = (request.POST if request.method == "POST" else request.GET).get("fp", "").strip()
    if request.method == "POST":
        try:
            scope = scopes.read(request.POST.get("scope", ""), name, group, request.user)
            rate = max(1, min(int(request.POST.get("rate_limit") or KINDS["replay"].rate), 50_000))
        except (scopes.ScopeInvalid, ValueError) as exc:
            return HttpResponseBadRequest(str(exc) if isinstance(exc, scopes.ScopeInvalid) else
                                          "the rate limit must be a whole number of messages per second")
        # Counted here, not taken from the form: the operation's size is what is dead in scope now.
        try:
            total = services.dead_count(name, scope)
        except services.UnknownBatch:   # trimmed since the preview was signed: a 404, as the GET
            raise Http404(f"Topic {name} has no such batch in group {group} (any more).") from None
        try:
            first = canary.settings_from(request.POST, total)
        except canary.CanaryInvalid as exc:
            return HttpResponseBadRequest(str(exc))
        if first and scope.get("batch"):   # a canary picks the group's first dead letters, not the batch's
            return HttpResponseBadRequest("a batch's dead letters are replayed without a canary: uncheck it")
        op = start_operation(request, name, group, KINDS["replay"], scope, total, rate, canary=first)
        if op is None:
            return redirect("delayq:topic_state", name, group, "dead")
        messages.success(request, f"Replay operation #{op.pk} started: {total:,} dead letters of group {group} "
                                  f"in {name} at up to {rate}/s" + (f"; canary: {canary.words(first)}." if first else "."))
        return redirect("delayq:operation", op_id=op.pk)
    try:
        preview = services.replay_preview(name, fp, parse_time(request.GET.get("from")),
                                          parse_time(request.GET.get("to")), group=group,
                                          batch=services.batch_id(request.GET.get("batch", "")))
    except services.UnknownBatch:
        raise Http404(f"Topic {name} has no such batch in group {group}.") from None
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return redirect("delayq:topic_state", name, group, "dead")
    rules = services.redaction_rules(name)
    preview["samples"] = [message_view(m, request.user, rules) for m in preview["samples"]]
    preview["scope_token"] = scopes.sign(name, request.user, preview["scope"])
    preview["count_text"] = f"{preview['count']:,}"
    return render(request, "delayq/replay_preview.html", {"name": name, "group": group, "fp": fp, **preview,
                                                             "canary": canary.DEFAULTS, "canary_max": canary.MAX_SIZE,
                                                             "perms": user_perms(request.user)})


@transaction.non_atomic_requests
@require("view_queue")
def bulk_state(request, name, state, action, group=None):
    """"Reschedule all" / "Kill all" of one state of a group. GET: the preview (count, scope in
    words, and for reschedule the new due time from the tab's form), signed. POST: confirm, which
    starts a BulkOperation run by Celery; nothing bulk happens in this request."""
    kind = KINDS.get(action)
    # The kinds that walk a state from the tab's form start here (spread has its own preview: views_forecast).
    if kind is None or not kind.walks or kind.action is None or not kind.action.row:
        raise Http404("no such bulk action")
    entry = kind.action
    if not can(request.user, entry.perm):
        raise PermissionDenied(f"You need the '{entry.perm}' permission for this.")
    name = topic_name(name)
    state = parse_state(state)
    group = group_name(name, group)
    if not entry.applies(state):
        return HttpResponseBadRequest(f"{action} does not apply to {state.value} messages")
    back = redirect("delayq:topic_state", name, group, state.value)
    if request.method == "POST":
        try:
            scope = scopes.read(request.POST.get("scope", ""), name, group, request.user, kind=action)
        except scopes.ScopeInvalid as exc:
            return HttpResponseBadRequest(str(exc))
        if scope.get("state") != state.value:
            return HttpResponseBadRequest("this preview was made for another state: open the preview again")
        total = services.state_preview(name, state, group)["count"]
        op = start_operation(request, name, group, kind, scope, total, kind.rate)
        if op is None:
            return back
        messages.success(request, f"{entry.label} operation #{op.pk} started: {kind.words(name, scope)}.")
        return redirect("delayq:operation", op_id=op.pk)
    at_ms = parse_time(request.GET.get("reschedule_at")) if entry.needs_time else None
    if entry.needs_time and at_ms is None:
        messages.warning(request, "Give the new due time (UTC) first, then choose Reschedule all.")
        return back
    if at_ms is not None and (problem := due_time_problem(at_ms)):
        messages.error(request, f"The new due time {problem}: give another, then choose Reschedule all.")
        return back
    try:
        preview = services.state_preview(name, state, group)
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return back
    scope = {**preview["scope"], **({"due_ms": at_ms} if at_ms is not None else {})}
    return render(request, "delayq/bulk_preview.html", {
        "name": name, "group": group, "state": state.value, "count": preview["count"],
        "words": kind.words(name, scope),
        "scope_token": scopes.sign(name, request.user, scope, kind=action),
        "confirm_label": f"{entry.label} {preview['count']:,} {state.value} message{'s' if preview['count'] != 1 else ''} "
                         f"of group {group} in {name}",
        "perms": user_perms(request.user)})


class ScopeUsed(Exception):
    """The signed preview already started an operation (``op``): a double click, or a replayed POST."""

    def __init__(self, op: BulkOperation | None):
        super().__init__(f"this preview already started operation #{op.pk if op else '?'}")
        self.op = op


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def operation_started_by(token: str) -> BulkOperation | None:
    """The operation a single-use ``token`` started (start_operation keeps its digest), if any."""
    return BulkOperation.objects.filter(scope_token=_digest(token)).first()


def start_operation(request, name, group, kind: OperationKind, scope, total, rate,
                    token: str | None = None, canary: dict | None = None) -> BulkOperation | None:
    """The new operation, queued for a Celery worker; None (with the broker error shown) when the
    broker cannot take it, in which case no operation is left behind waiting for a task. With the
    signed preview's ``token``, that preview starts one operation only (ScopeUsed otherwise)."""
    digest = _digest(token) if token else None
    try:
        with transaction.atomic():
            op = BulkOperation.objects.create(action=kind.name, topic=name, group=group, scope=scope, total=total,
                                              rate_limit=rate, batch_size=kind.batch_size, created_by=request.user,
                                              scope_token=digest, canary=canary or {})
    except IntegrityError:
        raise ScopeUsed(BulkOperation.objects.filter(scope_token=digest).first()) from None
    try:
        # After the commit (the worker must find the row); the views are non-atomic for this.
        background.enqueue(run_bulk_operation, op.pk)
    except background.BrokerUnavailable as exc:
        op.delete()
        _audited_failure(request, exc, f"{kind.name}_operation.start", topic=name, scope=scope, requested=total)
        return None
    audit.record(request.user, f"{kind.name}_operation.start", topic=name, scope=scope, requested=total,
                 detail=f"operation #{op.pk}" + (f"; canary: {canary_words(canary)}" if canary else ""))
    return op


@transaction.non_atomic_requests
@require_POST
@require("purge_topic")
def purge(request, name, state, group=None):
    """Purge one state of one group after a typed confirmation of the count; runs as an operation."""
    name = topic_name(name)
    state = parse_state(state)
    group = group_name(name, group)
    back = redirect("delayq:topic_state", name, group, state.value)
    if not action_table.ACTIONS["purge"].applies(state):
        messages.error(request, f"{state.value} messages cannot be purged: a worker holds them; wait for their ack "
                                "or lease expiry, or pause the group first.")
        return back
    try:
        count, scope = services.purge_scope(name, state, group)
    except QueueError as exc:
        messages.error(request, str(exc))
        return back
    if request.POST.get("confirm", "").strip() != str(count):
        messages.error(request, f"Type the number of {state.value} messages of group {group} ({count}) to confirm "
                                "the purge.")
        return back
    if scope is None:
        messages.info(request, f"No {state.value} messages of group {group} to purge.")
        return back
    op = start_operation(request, name, group, KINDS["purge"], scope, count, KINDS["purge"].rate)
    if op is None:
        return back
    messages.success(request, f"Purge operation #{op.pk} started for {count:,} {state.value} messages of group "
                              f"{group} in {name}.")
    return redirect("delayq:operation", op_id=op.pk)


def _operation_for(request, op_id) -> BulkOperation:
    """The operation, if the user may act on it (the permission its kind takes: operation_kinds)."""
    op = get_object_or_404(BulkOperation, pk=op_id)
    if not can(request.user, op.permission):
        raise PermissionDenied(f"You need the '{op.permission}' permission for this.")
    return op


@require_POST
@require("view_queue")
def cancel_operation(request, op_id):
    op = _operation_for(request, op_id)
    changed = BulkOperation.objects.filter(pk=op_id, status__in=["pending", "running"]).update(
        status=BulkOperation.Status.CANCELLED, cancelled_by=request.user, finished=timezone.now())
    if changed:
        audit.record(request.user, f"{op.action}_operation.cancel", topic=op.topic, group=op.group, scope=op.scope,
                     detail=f"operation #{op.pk}")
        messages.success(request, f"Operation #{op.pk} cancelled; what it moved so far stays moved.")
    else:
        messages.info(request, f"Operation #{op.pk} had already finished.")
    return redirect("delayq:operation", op_id=op.pk)


@transaction.non_atomic_requests
@require_POST
@require("view_queue")
def resume_operation(request, op_id):
    """Enqueue the operation again (its worker died, or Redis failed). Safe to repeat: the scope's
    cutoff is frozen and replay is compare-and-set, so nothing moves twice."""
    op = _operation_for(request, op_id)
    if op.status not in (BulkOperation.Status.RUNNING, BulkOperation.Status.FAILED,
                         BulkOperation.Status.PENDING):
        messages.info(request, f"Operation #{op.pk} is {op.status}; nothing to resume.")
        return redirect("delayq:operation", op_id=op.pk)
    if why := op.resume_refused:
        # Not a redirect with a note: a client that POSTs without the page (a script, a stale tab)
        # must see the refusal in the status, as for any other request that cannot be served.
        audit.record(request.user, f"{op.action}_operation.resume", topic=op.topic, group=op.group, scope=op.scope,
                     result="refused", detail=f"operation #{op.pk}: {why}")
        return render(request, "delayq/error.html", {"status": 409, "text": why}, status=409)
    if op.kind.holds and (undo := operation_started_by(undo_token(op.pk))) is not None:
        # It would remove again what the undo put back, where no second undo reaches (one per operation).
        audit.record(request.user, f"{op.action}_operation.resume", topic=op.topic, group=op.group, scope=op.scope,
                     result="refused", detail=f"operation #{op.pk}: undone by operation #{undo.pk}")
        messages.error(request, f"Operation #{op.pk} was undone by operation #{undo.pk}, so it cannot be resumed: it "
                                f"would remove again what the undo put back. Start a new {op.action} if you mean to.")
        return redirect("delayq:operation", op_id=op.pk)
    fresh = op.status == BulkOperation.Status.RUNNING and op.heartbeat and timezone.now() - op.heartbeat < STALL_AFTER
    if fresh and op.kind.keeps_cursor:
        # A kind whose batches cannot tell what another run did (a backfill would publish the
        # same ticks twice) is never taken from a run that may be alive: only once it is stale.
        messages.info(request, f"Operation #{op.pk} is running (last progress {(timezone.now() - op.heartbeat).seconds} s "
                               f"ago); it can be resumed once its worker has written no progress for "
                               f"{STALL_AFTER.seconds // 60} minutes.")
        return redirect("delayq:operation", op_id=op.pk)
    # Otherwise the new task takes the operation over: the kinds are compare-and-set (nothing moves
    # twice), and a run that was still alive stops at its next progress write.
    previous = op.status
    # The stopped run's hold goes, so the new task can take the operation.
    BulkOperation.objects.filter(pk=op.pk).update(status=BulkOperation.Status.PENDING, error="", finished=None,
                                                  runner="")
    try:
        background.enqueue(run_bulk_operation, op.pk)
    except background.BrokerUnavailable as exc:
        BulkOperation.objects.filter(pk=op.pk).update(status=previous, error=str(exc))
        _audited_failure(request, exc, f"{op.action}_operation.resume", topic=op.topic, group=op.group,
                         scope=op.scope, detail=f"operation #{op.pk}: {exc}")
        return redirect("delayq:operation", op_id=op.pk)
    audit.record(request.user, f"{op.action}_operation.resume", topic=op.topic, group=op.group, scope=op.scope,
                 detail=f"operation #{op.pk}")
    messages.success(request, f"Operation #{op.pk} resumed.")
    return redirect("delayq:operation", op_id=op.pk)


BRIDGE_EDIT_REFUSED = ("Celery tasks waiting in delayq cannot be edited: only the Celery bridge writes celery.* "
                       "topics, and it signs each task, so an edited task would never run. Replay it as it is, or "
                       "send a new task from your application.")


@require("view_queue")
def edit_and_replay(request, name, msg_id, group=None):
    """Edit a dead letter's JSON payload and replay it in its group; the audit keeps the diff."""
    name = topic_name(name)
    group = group_name(name, group)
    for perm in action_table.ACTIONS["edit_replay"].perms:
        if not can(request.user, perm):
            raise PermissionDenied(f"You need the '{perm}' permission to edit payloads.")
    if is_bridge_topic(name):
        return render(request, "delayq/error.html", {"status": 403, "text": BRIDGE_EDIT_REFUSED}, status=403)
    message = services.get_message(name, msg_id, group)
    if message is None or message.state is not MessageState.dead:
        messages.error(request, "Only dead letters can be edited and replayed; this one is gone or has moved on.")
        return redirect("delayq:topic_state", name, group, "dead")
    try:
        json.loads(message.payload)
        # Re-indented, not re-encoded: numbers and key order stay as the producer wrote them.
        original = jsontext.pretty(message.payload.decode())
    except (ValueError, UnicodeDecodeError, RecursionError):
        original = None
    context = {"name": name, "group": group, "m": message, "original": original, "perms": user_perms(request.user),
               "seen": hashlib.sha1(message.payload).hexdigest(), "text": original}
    if original is None:
        context["error"] = "This payload is not JSON (or is nested too deeply); only JSON payloads can be edited here."
        return render(request, "delayq/edit.html", context, status=400)
    if request.method != "POST":
        return render(request, "delayq/edit.html", context)
    text = request.POST.get("payload", "")
    context["text"] = text
    try:
        json.loads(text)
    except (ValueError, RecursionError) as exc:
        context["error"] = f"Not valid JSON: {exc}. Nothing was replayed."
        return render(request, "delayq/edit.html", context, status=400)
    new_text = jsontext.pretty(text)
    diff = "\n".join(difflib.unified_diff(original.splitlines(), new_text.splitlines(), "before", "after",
                                          lineterm=""))
    # Everyone who reads the audit log sees the diff redacted; the full one is a private, audited reveal.
    redactor = Redactor(services.redaction_rules(name))
    before_shown = redactor.payload(celery_tasks.for_display(message.payload))[0]
    after_shown = redactor.payload(celery_tasks.for_display(new_text.encode()))[0]
    shown_diff = redactor.text("\n".join(difflib.unified_diff(before_shown.splitlines(), after_shown.splitlines(),
                                                              "before", "after", lineterm="")))
    try:
        replayed_id = services.replay_edited(name, msg_id, jsontext.minify(text), request.POST.get("seen", ""),
                                             actor=f"user:{request.user.get_username()}", group=group)
    except (StateConflict, PayloadTooLarge) as exc:
        audit.record(request.user, "message.edit_replay", topic=name, group=group, message_ids=[msg_id],
                     requested=1, affected=0, result="refused", detail=str(exc))
        context["error"] = f"{exc}"
        return render(request, "delayq/edit.html", context, status=409)
    except NotReplicated as exc:
        _audited_failure(request, exc, "message.edit_replay", topic=name, group=group,
                         message_ids=list(dict.fromkeys([msg_id, *exc.ids])), requested=1, affected=1,
                         scope={"diff": shown_diff}, private={"diff": diff},
                         say=f"Payload edited and replayed, but: {exc}.")
        return redirect("delayq:message", name, group, exc.ids[0])
    ids = [msg_id] if replayed_id == msg_id else [msg_id, replayed_id]
    audit.record(request.user, "message.edit_replay", topic=name, group=group, message_ids=ids, requested=1,
                 affected=1, scope={"diff": shown_diff}, private={"diff": diff},
                 detail="" if replayed_id == msg_id else
                 f"replayed as {replayed_id}: other groups still hold the original payload")
    messages.success(request, "Payload edited and message replayed." if replayed_id == msg_id else
                     f"Payload edited and replayed as {replayed_id} (other groups keep the original {msg_id}).")
    return redirect("delayq:message", name, group, replayed_id)


@require_POST
@require("manage_topics")
def topic_pause(request, name, group=None):
    """Pause or resume one consumer group of the topic. htmx (the button in the page's header)
    gets the header's state and button back, the result as a toast and a counts refresh; a plain
    form post goes back to the group's page."""
    name = topic_name(name)
    group = group_name(name, group)
    paused = request.POST.get("paused") == "1"
    what = "topic.pause" if paused else "topic.resume"
    try:
        services.set_paused(name, paused, group)
    except services.UnknownTopic as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    except Unavailable as exc:
        _audited_failure(request, exc, what, topic=name, group=group, requested=1, affected=0)
    else:
        audit.record(request.user, what, topic=name, group=group, requested=1, affected=1)
        messages.success(request, f"Group {group} of {name} {'paused: its workers stop claiming' if paused else 'resumed'}.")
    services.forget_summary(name, group)
    if not request.htmx:
        return redirect("delayq:topic", name, group)
    try:
        gconfig = services.group_config(name, group)
    except Unavailable:
        # Redis went away: the header stays as it was and the toast says why (set_paused's failure).
        response = HttpResponse(render_to_string("delayq/messages.html", {"messages": list(get_messages(request)),
                                                                          "oob": True}, request))
        response["HX-Reswap"] = "none"
        return response
    response = render_region(request, "delayq/topic.html", "groupstate",
                             {"name": name, "group": group, "gconfig": gconfig, "perms": user_perms(request.user)})
    response["HX-Trigger"] = "counts-changed"
    return response


@require_POST
@require("manage_topics")
def topic_adopt(request, name):
    name = topic_name(name)
    if Topic.objects.filter(name=name).exists():
        messages.info(request, f"{name} is already managed.")
        return redirect("delayq:topic", name=name)
    try:
        topic = services.adopt(name)
    except services.UnknownTopic as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return redirect("delayq:overview")
    audit.record(request.user, "topic.adopt", topic=name, affected=1,
                 scope={"retry_policy": topic.retry_policy.name})
    messages.success(request, f"{name} is now managed (retry policy: {topic.retry_policy.name}). "
                              "Edit it in the admin.")
    return redirect("delayq:topic", name=name)
