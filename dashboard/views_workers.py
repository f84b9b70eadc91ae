"""The Workers page: every live worker (host, pid, group, topics, concurrency, in flight, since,
last heartbeat, version) and the consumer groups that have none. Its JSON twin is api.workers."""

from django.shortcuts import render
from django.urls import reverse

from . import services
from .access import REDIS_DOWN, require
from .services.contracts import Unavailable
from .views import render_region

# ?sort= values: each a key of the rows; ties fall back to group, host, pid and id so the order
# never jumps between refreshes.
SORTS = {
    "group": lambda w: (),
    "host": lambda w: (w["host"] or "", w["pid"] or 0),
    "busy": lambda w: (-(w["in_flight"] or 0),),
    "since": lambda w: (w["started"] is None, w["started"] or 0),
    "beat": lambda w: (w["last_beat_age_s"],),
}
DEFAULT_SORT = "group"


class BadSort(ValueError):
    pass


def worker_sort(value: str | None) -> str:
    """The ``?sort=`` asked for (DEFAULT_SORT when none); BadSort names the choices."""
    sort = value or DEFAULT_SORT
    if sort not in SORTS:
        raise BadSort(f"unknown sort {sort[:40]!r}: use one of {', '.join(SORTS)}")
    return sort


def sorted_workers(workers: list[dict], sort: str) -> list[dict]:
    key = SORTS[sort]
    return sorted(workers, key=lambda w: (*key(w), w["group"], w["host"] or "", w["pid"] or 0, w["id"]))


@require("view_queue")
def workers(request):
    """Live workers, sorted by ``?sort=`` (group by default); htmx polls ask for the region only."""
    try:
        sort = worker_sort(request.GET.get("sort"))
    except BadSort as exc:
        return render(request, "delayq/error.html", {"status": 400, "text": str(exc)}, status=400)
    error, report = None, {"workers": [], "unattended": [], "now": None, "leases": [],
                           "leases_uncounted": 0}
    try:
        report = services.live_workers()
    except Unavailable as exc:
        error = REDIS_DOWN.format(exc)
    rows = sorted_workers(report["workers"], sort)
    # One reverse() for every link: topics/<name>/ is this prefix plus the name.
    topic_url = reverse("delayq:topic", args=["-"])[:-2]
    for row in rows:
        row["topic_links"] = [(t, f"{topic_url}{t}/") for t in row["topics"]]
    unattended = [{"topic": t, "group": g, "url": f"{topic_url}{t}/{g}/ready/"} for t, g in report["unattended"]]
    leases = [{**row, "url": f"{topic_url}{row['topic']}/{row['group']}/unacked/"} for row in report["leases"]]
    return render_region(request, "delayq/workers.html", "workers", {
        "workers": rows, "unattended": unattended, "leases": leases,
        "leases_uncounted": report["leases_uncounted"], "lease_slots": services.LEASE_SLOTS, "now": report["now"], "redis_error": error, "sort": sort,
        "sorts": list(SORTS), "hosts": len({w["host"] for w in rows if w["host"]}),
        "in_flight": sum(w["in_flight"] or 0 for w in rows)})
