"""Plain function views. Access helpers in access.py; Redis only through services.py.

htmx requests get the region they asked for (``page.html#region``); plain requests the full page,
and actions answer plain POSTs with a redirect (post/redirect/get).
"""

import redis
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from queue_core import InvalidTopic, MessageState
from queue_core.keys import validate_topic

from . import audit, services
from .access import require, user_perms
from .models import Topic

REDIS_DOWN = "Redis is unreachable ({}). Check DELAYQ_REDIS_URL / REDIS_URL and that the server is running."


def _topic_name(name: str) -> str:
    try:
        return validate_topic(name)
    except InvalidTopic:
        raise Http404("no such topic") from None


@require("view_queue")
def overview(request):
    """Every topic with its counts per state. htmx polls ask only for the summary region."""
    error = None
    try:
        topics = services.topic_summaries()
    except redis.RedisError as exc:
        topics = []
        error = REDIS_DOWN.format(exc)
    template = "dashboard/overview.html#summary" if request.htmx else "dashboard/overview.html"
    return render(request, template, {"topics": topics, "redis_error": error, "perms": user_perms(request.user)})


@require("view_queue")
def topic_detail(request, name):
    name = _topic_name(name)
    topic = Topic.objects.select_related("retry_policy").filter(name=name).first()
    q = services.get_queue()
    try:
        counts = q.counts(name)
        config = topic.engine_config() if topic else q.topic_config(name)
        known = topic is not None or name in q.topics()
    except redis.RedisError as exc:
        return render(request, "dashboard/topic.html", {"name": name, "redis_error": REDIS_DOWN.format(exc)},
                      status=503)
    if not known:
        raise Http404("no such topic")
    context = {"name": name, "topic": topic, "config": config, "preview": config.retry.describe(),
               "counts": [(s.value, counts[s]) for s in MessageState], "perms": user_perms(request.user)}
    return render(request, "dashboard/topic.html", context)


@require_POST
@require("manage_topics")
def topic_pause(request, name):
    name = _topic_name(name)
    paused = request.POST.get("paused") == "1"
    try:
        services.set_paused(name, paused)
        audit.record(request.user, "topic.pause" if paused else "topic.resume", topic=name, requested=1, affected=1)
        messages.success(request, f"{name} {'paused: workers stop claiming' if paused else 'resumed'}.")
    except redis.RedisError as exc:
        audit.record(request.user, "topic.pause" if paused else "topic.resume", topic=name, requested=1,
                     affected=0, result="error", detail=str(exc))
        messages.error(request, REDIS_DOWN.format(exc))
    return redirect("dashboard:topic", name=name)


@require_POST
@require("manage_topics")
def topic_adopt(request, name):
    name = _topic_name(name)
    if Topic.objects.filter(name=name).exists():
        messages.info(request, f"{name} is already managed.")
        return redirect("dashboard:topic", name=name)
    try:
        topic = services.adopt(name)
    except redis.RedisError as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return redirect("dashboard:overview")
    audit.record(request.user, "topic.adopt", topic=name, affected=1,
                 scope={"retry_policy": topic.retry_policy.name})
    messages.success(request, f"{name} is now managed (retry policy: {topic.retry_policy.name}). "
                              "Edit it in the admin.")
    if request.htmx:
        response = overview(request)
        response["HX-Trigger"] = "topic-adopted"
        return response
    return redirect(reverse("dashboard:topic", kwargs={"name": name}))
