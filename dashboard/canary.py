"""Canary replay: a replay operation that starts with a few of its dead letters, watches them, and
replays the rest only if enough of those were acked.

The canary is the first ``percent`` % of the count (at least ``minimum``, at most MAX_SIZE) in the
scope's order (oldest death first). They are replayed, then watched for up to ``wait_s`` seconds:
the operation continues once ``threshold`` % of them have been acked, and stops, saying why, as
soon as that can no longer happen or the wait is over without it. An ack leaves no trace in the
group, so a canary message the group no longer holds counts as acked only when the topic's event
stream records its ack (q.acked(), read on from where the last look stopped); one deleted,
cancelled or expired meanwhile counts as "left otherwise", never as a success. A topic with its
events off records no acks: there every message gone counts as acked, and the page says so. Acked messages
are done and dead ones stay dead, so deciding early changes nothing a longer wait would have seen.
A failed canary leaves the rest of the scope dead and untouched; the decision is audited and the
operation page shows the canary's acked / dead / in-flight counts while it runs.

The canary's state lives in BulkOperation.canary: its thresholds (set on the preview), the ids it
replayed, the counts last seen and the verdict. A run resumed mid-wait watches the same ids.
"""

import math
import time
from datetime import datetime, timedelta

from django.db.models import F
from django.utils import timezone

from . import audit
from .models import BulkOperation
from .services.contracts import DEFAULT_GROUP, MessageState
from .services.engine import get_queue
from .services.messages import message_page
from .services.operations import dead_count

MAX_SIZE = 1_000             # canary messages at most (states() reads them in one round trip)
POLL_S = 1.0                 # how often a waiting canary is looked at
DEFAULTS = {"percent": 1.0, "minimum": 20, "wait_s": 600, "threshold": 95.0}
LIMITS = {"percent": (0.01, 100.0), "minimum": (1, MAX_SIZE), "wait_s": (1, 86_400), "threshold": (1.0, 100.0)}


class CanaryInvalid(ValueError):
    pass


def settings_from(form, total: int) -> dict:
    """The canary's thresholds from the preview form (each in LIMITS; CanaryInvalid names the
    one out of range), and its size for ``total`` dead letters in scope. {} without a canary."""
    if not form.get("canary"):
        return {}
    out = {}
    for name, (low, high) in LIMITS.items():
        raw = (form.get(name) or "").strip() or str(DEFAULTS[name])
        try:
            value = type(DEFAULTS[name])(float(raw)) if isinstance(DEFAULTS[name], float) else int(raw)
        except ValueError:
            raise CanaryInvalid(f"the canary's {name.replace('_s', '')} must be a number (got {raw[:20]!r})") from None
        if not low <= value <= high:
            raise CanaryInvalid(f"the canary's {name.replace('_s', '')} must be between {low:g} and {high:g} "
                                f"(got {value:g})")
        out[name] = value
    out["size"] = min(MAX_SIZE, total, max(out["minimum"], math.ceil(total * out["percent"] / 100)))
    return out


def words(canary: dict) -> str:
    return (f"first {canary['size']:,} ({canary['percent']:g} %, at least {canary['minimum']}), then wait up to "
            f"{_wait_words(canary['wait_s'])} and continue only if at least {canary['threshold']:g} % of them "
            "were acked")


def _wait_words(seconds: int) -> str:
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"


def run_canary(op: BulkOperation, runner: str, actor: str) -> str:
    """The canary phase of ``op`` (a replay with op.canary set and no verdict yet): "passed" (go
    on with the rest), "failed" (stop: the rest stays dead), "cancelled" or "superseded"."""
    canary = dict(op.canary)
    group = op.group or DEFAULT_GROUP
    q = get_queue()
    if not canary.get("ids"):
        ids = _pick(op.topic, op.scope, canary["size"], group)
        if not ids and (left := dead_count(op.topic, {**op.scope, "group": group})):
            canary.update(ids=[], acked=0, dead=left, waiting=0, verdict="failed",
                          why=f"none of the scope's {left:,} dead letters could be picked as a canary; nothing "
                              "was replayed")
        else:
            canary.update(ids=ids, until=(timezone.now() + timedelta(seconds=canary["wait_s"])).isoformat(),
                          stream=q.server_ms(),   # where acks are looked for (Redis ms): before the replay
                          acks_recorded=q.topic_config(op.topic).events)
        # The ids are saved before they are replayed: a run that dies in between (NotReplicated
        # after the replay, say) resumes with the same canary, and replay is compare-and-set.
        if not BulkOperation.objects.filter(pk=op.pk, runner=runner).update(canary=canary, heartbeat=timezone.now()):
            return "superseded"
        if canary.get("verdict"):
            _audit(op, group, canary)
            return canary["verdict"]
    if not canary.get("replayed"):
        replayed = q.replay(op.topic, canary["ids"], actor=actor, group=group) if canary["ids"] else 0
        canary["replayed"] = True
        if not BulkOperation.objects.filter(pk=op.pk, runner=runner).update(
                canary=canary, moved=F("moved") + replayed, heartbeat=timezone.now()):
            return "superseded"
    until = datetime.fromisoformat(canary["until"])
    while True:
        read_all = _look(q, op, group, canary)
        verdict = _verdict(canary, over=timezone.now() >= until and read_all)
        if verdict:
            canary.update(verdict=verdict, why=_why(canary, verdict))
        if not BulkOperation.objects.filter(pk=op.pk, runner=runner).update(canary=canary, heartbeat=timezone.now()):
            return "superseded"
        if verdict:
            _audit(op, group, canary)
            return verdict
        if BulkOperation.objects.values_list("status", flat=True).get(pk=op.pk) == BulkOperation.Status.CANCELLED:
            return "cancelled"
        time.sleep(POLL_S)


def _look(q, op: BulkOperation, group: str, canary: dict) -> bool:
    """Count the canary's messages (acked, dead again, left otherwise, waiting) into ``canary``;
    False while the event stream has more to read than one look reads."""
    states = q.states(op.topic, canary["ids"], group=group)
    gone = {msg_id for msg_id, state in zip(canary["ids"], states, strict=True) if state is None}
    read_all = True
    if not canary.get("acks_recorded", False):
        acked = gone
    else:
        if gone - set(canary.get("acked_ids", [])):
            seen = q.acked(op.topic, canary["ids"], group=group, since=canary["stream"])
            canary.update(stream=seen.cursor, acked_ids=sorted({*canary.get("acked_ids", []), *seen.ids}))
            read_all = seen.complete
        acked = gone & set(canary.get("acked_ids", []))
    # While the stream is not read through, a message gone without a seen ack may still have one
    # ahead: it counts as waiting, not as left (a canary must not fail on an unread ack).
    left = len(gone - acked) if read_all else 0
    canary.update(acked=len(acked), dead=sum(1 for s in states if s is MessageState.dead), left=left)
    canary["waiting"] = len(states) - canary["acked"] - canary["dead"] - canary["left"]
    return read_all


def _pick(topic: str, scope: dict, size: int, group: str) -> list[str]:
    """The canary's ids: the scope's first ``size`` dead letters (oldest death first). An error
    group is read from its own index within the scope's time range, page after page (an index
    entry whose letter has gone meanwhile thins a page out), so other errors' letters never hide
    it; each page is one bounded read."""
    ids: list[str] = []
    cursor = None
    while len(ids) < size:
        letters, cursor = message_page(topic, MessageState.dead, after=cursor, since_ms=scope.get("since_ms") or None,
                                       until_ms=scope["cutoff_ms"], fingerprint=scope.get("fingerprint") or "",
                                       limit=size - len(ids), group=group)
        ids += [m.id for m in letters if m.id not in ids]
        if not cursor:
            break
    return ids[:size]


def _audit(op: BulkOperation, group: str, canary: dict) -> None:
    audit.record(op.created_by, "replay_operation.canary", topic=op.topic, group=group, scope=op.scope,
                 requested=len(canary["ids"]), affected=canary["acked"],
                 result="ok" if canary["verdict"] == "passed" else "refused",
                 message_ids=canary["ids"], detail=f"operation #{op.pk}: canary {canary['verdict']}: {canary['why']}")


def _verdict(canary: dict, *, over: bool) -> str:
    size = len(canary["ids"])
    if not size:
        return "passed"     # nothing was left to replay as a canary: nothing to judge
    needed = math.ceil(size * canary["threshold"] / 100)
    if canary["acked"] >= needed:
        return "passed"
    if size - canary["dead"] - canary.get("left", 0) < needed or over:
        return "failed"     # too many dead again or gone otherwise to reach the threshold, or the wait is over
    return ""


def _why(canary: dict, verdict: str) -> str:
    size = len(canary["ids"])
    if not size:
        return "no dead letter was left to replay as a canary"
    left = f", {canary['left']} deleted, cancelled or expired meanwhile" if canary.get("left") else ""
    counts = (f"{canary['acked']} of {size} acked ({100 * canary['acked'] / size:.0f} %), {canary['dead']} dead "
              f"again{left}, {canary['waiting']} not acked yet (being handled or not claimed)")
    if verdict == "passed":
        return f"{counts}; at least {canary['threshold']:g} % acked, so the rest is replayed"
    needed = math.ceil(size * canary["threshold"] / 100)
    how = ("too many died again to reach" if size - canary["dead"] - canary.get("left", 0) < needed else
           f"the {_wait_words(canary['wait_s'])} wait ended below")
    return f"{counts}: {how} {canary['threshold']:g} % acked, so the rest stays dead, untouched"
