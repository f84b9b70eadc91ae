import redis
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from . import services


@login_required
def overview(request):
    """Every topic with its counts per state. htmx polls ask only for the summary region."""
    error = None
    try:
        topics = services.topic_summaries()
    except redis.RedisError as exc:
        topics = []
        error = f"Redis is unreachable ({exc}). Check REDIS_URL and that the server is running."
    template = "dashboard/overview.html#summary" if request.htmx else "dashboard/overview.html"
    return render(request, template, {"topics": topics, "redis_error": error})
