"""The Memory page of a topic: its Redis memory, its share of maxmemory, the time until Redis (or
the topic's budget) is full at the current growth, and the budget (set in the admin)."""

from django.shortcuts import render

from .access import REDIS_DOWN, require
from .services.contracts import ClusterRefused, Unavailable
from .services.memory import topic_memory
from .views import topic_name


@require("view_queue")
def memory(request, name):
    name = topic_name(name)
    try:
        view = topic_memory(name)
    except Unavailable as exc:
        return render(request, "delayq/error.html", {"status": 503, "text": REDIS_DOWN.format(exc)}, status=503)
    except ClusterRefused as exc:   # a cluster client's refusal is no RedisError: still a clear answer, never a 500
        return render(request, "delayq/error.html", {"status": 503, "text": f"Redis Cluster refused a command the "
                      f"memory reading needs ({exc}); the rest of the console works."}, status=503)
    return render(request, "delayq/memory.html", {"name": name, "v": view, "m": view.m})
