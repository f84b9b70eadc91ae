"""Act on every message a query matches ("Replay all matching…" on a query tab, and cancel/delete,
reschedule, kill): the same path as every bulk action. GET shows the preview (count, five samples,
the scope in words) and signs the frozen scope; POST with that scope starts a BulkOperation that a
Celery worker runs in batches, rate limited, cancellable and resumable, audited. Nothing bulk
happens in the request.

The scope freezes the state's last score and Redis's time at the preview: the operation acts only
on messages that still match, that were in the state by then and that score up to that cutoff,
so what arrives or changes after the preview is left alone (purge's rule)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render

from . import scopes, services
from .access import REDIS_DOWN, can, require, user_perms
from .action_table import ACTIONS
from .actions import start_operation
from .finding import matches_as_shown, parse_query, with_fingerprint
from .message_view import message_view
from .operation_kinds import KIND_OF_MATCHING, KINDS, matching_action
from .services.contracts import Unavailable
from .services.publishing import due_time_problem
from .views import group_name, parse_partition, parse_state, parse_time, topic_name


@transaction.non_atomic_requests
@require("view_queue")
def act_on_matching(request, name, state, action, group=None):
    kind_name = KIND_OF_MATCHING.get(action)
    if kind_name is None:
        raise Http404(f"no such action on matches: one of {', '.join(KIND_OF_MATCHING)}")
    kind = KINDS[kind_name]
    if not can(request.user, kind.permission):
        raise PermissionDenied(f"You need the '{kind.permission}' permission for this.")
    name = topic_name(name)
    state = parse_state(state)
    group = group_name(name, group)
    entry = ACTIONS[action]   # its words; the permission is the kind's (a bulk delete is a purge)
    if matching_action(kind_name, state.value) != action or not entry.applies(state):
        return HttpResponseBadRequest(f"{action} does not apply to {state.value} messages")
    back = redirect("delayq:topic_state", name, group, state.value)
    if request.method == "POST":
        try:
            scope = scopes.read(request.POST.get("scope", ""), name, group, request.user, kind=f"matching-{action}")
        except scopes.ScopeInvalid as exc:
            return HttpResponseBadRequest(str(exc))
        if scope.get("state") != state.value:
            return HttpResponseBadRequest("this preview was made for another state: open the preview again")
        op = start_operation(request, name, group, kind, scope, scope["count"], kind.rate)
        if op is None:
            return back
        messages.success(request, f"{entry.label} operation #{op.pk} started: {kind.words(name, scope)}.")
        return redirect("delayq:operation", op_id=op.pk)
    query = with_fingerprint(parse_query(request.GET.get("q", "")), request.GET.get("fp", "").strip())
    if not query.terms:
        return HttpResponseBadRequest("give the query (?q=...) whose matches to act on")
    at_ms = parse_time(request.GET.get("reschedule_at")) if entry.needs_time else None
    if entry.needs_time and (at_ms is None or due_time_problem(at_ms)):
        problem = "is missing" if at_ms is None else due_time_problem(at_ms)
        messages.error(request, f"The new due time {problem}: give another, then choose Reschedule all matching.")
        return back
    partition = parse_partition(request.GET.get("p"), services.topic_config(name).partitions)
    try:
        preview = services.matching_preview(name, state, query, group=group, confirm=matches_as_shown(name, query),
                                            partition=partition, since_ms=parse_time(request.GET.get("from")),
                                            until_ms=parse_time(request.GET.get("to")))
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return back
    # The count travels signed with the scope: the operation's size is what the server counted.
    scope = {**preview["scope"], "count": preview["count"], "count_is_lower_bound": not preview["exact"],
             **({"due_ms": at_ms} if at_ms is not None else {})}
    rules = services.redaction_rules(name)
    count = preview["count"]
    count_text = f"{count:,}" if preview["exact"] else f"at least {count:,}"
    return render(request, "delayq/matching_preview.html", {
        "name": name, "group": group, "state": state.value, "count": count, "count_text": count_text,
        "exact": preview["exact"], "scanned": preview["scanned"], "total": preview["total"],
        "samples": [message_view(m, request.user, rules) for m in preview["samples"]],
        "words": kind.words(name, scope), "query": query.text(),
        "scope_token": scopes.sign(name, request.user, scope, kind=f"matching-{action}"),
        "confirm_label": f"{entry.label} {count_text} matching {state.value} message{'s' if count != 1 else ''} "
                         f"of group {group} in {name}",
        "perms": user_perms(request.user)})

