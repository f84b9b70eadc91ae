"""The Schedules page: every schedule with its expression in words, next fire times, counters and
last 20 ticks (each fired one linking to its message), and the actions pause (with a note),
resume, run now and delete: POST only, CSRF-protected, permission-checked, audited."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from . import audit, services
from .access import REDIS_DOWN, can, require, user_perms
from .services.contracts import InvalidArgument, Unavailable
from .views import render_region

# Which permission each action needs: stopping or removing a schedule is configuration (admin);
# running one now publishes a message (operator).
ACTION_PERMS = {"pause": "manage_topics", "resume": "manage_topics", "delete": "manage_topics",
                "run": "publish_message"}
MAX_NOTE = 500


@require("view_queue")
def schedules(request):
    """Every schedule; htmx requests (actions, refresh) get the region only."""
    error, rows = None, []
    try:
        rows = services.schedules()
    except Unavailable as exc:
        error = REDIS_DOWN.format(exc)
    topic_url = reverse("delayq:topic", args=["-"])[:-2]   # one reverse() for every link: topics/<name>/...
    for row in rows:
        for tick in row["ticks"]:
            tick["url"] = f"{topic_url}{row['topic']}/messages/{tick['message_id']}/" if tick["message_id"] else None
    return render_region(request, "delayq/schedules.html", "schedules",
                         {"schedules": rows, "redis_error": error, "perms": user_perms(request.user)})


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
    note = request.POST.get("note", "").strip()
    if len(note) > MAX_NOTE:
        return render(request, "delayq/error.html", {"status": 400, "text": f"The note is {len(note)} characters "
                      f"long; keep it to {MAX_NOTE}."}, status=400)
    what = f"schedule.{action}"
    try:
        topic = services.schedule_topic(name)
    except (services.ScheduleNotFound, InvalidArgument) as exc:
        return render(request, "delayq/error.html", {"status": 404, "text": str(exc)}, status=404)
    try:
        said = services.act_on_schedule(name, action, note=note, actor=f"dashboard:{request.user.get_username()}")
    except (services.ScheduleNotFound, InvalidArgument) as exc:
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
