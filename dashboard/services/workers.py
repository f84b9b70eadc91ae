"""The Workers page: every live worker with what its heartbeat reports, and the consumer groups
that have none."""

from datetime import UTC, datetime

from .engine import get_queue

LIVE_WITHIN_S = 30.0   # as the overview's "no workers" badge and the delayq_workers gauge
# lease_counts costs a ZCARD and a ZCOUNT per (topic, group, partition) in one pipeline, plus TIME:
# two round trips whatever their number, but the pipeline grows with them. Measured (review 38w,
# Redis 7, this machine): 2,000 of them take 43 ms a call (0.6 µs of Redis each), 200 take 4.4 ms.
# Each live poll of the Workers page counts at most LEASE_SLOTS, groups in name order; the page
# says how many groups were left uncounted.
LEASE_SLOTS = 2000


def _when(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms is not None else None


def live_workers() -> dict:
    """Every worker with a heartbeat in the last LIVE_WITHIN_S seconds for any (topic, group) of
    the engine's registry, and the pairs with none: ``{"now", "workers": [row, ...], "unattended":
    [(topic, group), ...]}``, a row being the worker's id, group, topics, host, pid, runtime,
    concurrency, in flight, start, last heartbeat (and its age in seconds) and delayq version
    (None where the worker does not report one). Cost: the registry (one SMEMBERS), the layouts
    (one pipelined round trip), then two pipelined round trips however many groups and workers
    (DelayQueue.live_workers), and two for each group's unacked messages and expired leases
    (DelayQueue.lease_counts, ``leases``: the groups with any unacked; at most LEASE_SLOTS group
    partitions, ``leases_uncounted`` the groups past them): six round trips in all; nothing is
    cached."""
    q = get_queue()
    names = sorted(q.topics())
    layouts = q.layouts(names, fresh=True)   # a group added a second ago is named at once
    pairs = [(n, g) for n in names for g in layouts[n].groups]
    report = q.live_workers(pairs, within=LIVE_WITHIN_S)
    # What tells "in flight" from a group's unacked count: the leases that ran out (lease_counts).
    counted, slots = [], 0
    for t, g in pairs:
        slots += layouts[t].partitions
        if slots > LEASE_SLOTS:
            break
        counted.append((t, g))
    leases = [{"topic": t, "group": g, "unacked": unacked, "expired": expired}
              for (t, g), (unacked, expired) in q.lease_counts(counted).items() if unacked]
    workers = [{"id": w.id, "group": w.group, "topics": list(w.topics), "host": w.host, "pid": w.pid,
                "runtime": w.runtime, "concurrency": w.concurrency, "in_flight": w.in_flight,
                "started": _when(w.started_ms), "last_beat": _when(w.last_beat_ms),
                "last_beat_age_s": max(0.0, (report.now_ms - w.last_beat_ms) / 1000), "version": w.version}
               for w in report.workers]
    return {"now": _when(report.now_ms), "workers": workers, "unattended": report.unattended, "leases": leases,
            "leases_uncounted": len(pairs) - len(counted)}
