"""Operator actions and bulk work, as the dashboard asks the engine for them. Every call is
compare-and-set on the state the operator saw, within one consumer group; counts returned are what
actually moved."""

from dataclasses import dataclass, field
from datetime import UTC, datetime

from queue_core.errors import Code

from .batches import dead_in_batch
from .contracts import DEFAULT_GROUP, InvalidArgument, MessageState
from .engine import get_queue


def act(action: str, topic: str, ids: list[str], state: MessageState, actor: str, group: str = DEFAULT_GROUP,
        at_ms: int | None = None, hold: str | None = None) -> int:
    """One per-message action (see action_table) on ``ids`` of ``group``, compare-and-set on
    ``state``; ``at_ms`` is reschedule's new due time; ``hold``: the holding area that keeps what
    kill, cancel or delete remove, for undo (services/undo.py). One script call per batch of ids."""
    q = get_queue()
    if action == "reschedule":
        codes = q.reschedule_many(topic, ids, at=datetime.fromtimestamp(at_ms / 1000, tz=UTC), actor=actor,
                                  group=group, states=[state])
        if any(c == Code.DELAY_TOO_LONG for c in codes):
            raise InvalidArgument(f"that due time is further away than {topic}'s max_delay allows; choose an "
                                  "earlier time")
        return sum(1 for c in codes if c == 0)
    if action == "kill":
        return sum(1 for code in q.kill_many(topic, ids, actor=actor, group=group, hold=hold) if code == 0)
    if action == "replay":
        return q.replay(topic, ids, actor=actor, group=group)
    if action == "deliver_now":
        return sum(1 for code in q.deliver_now_many(topic, ids, actor=actor, group=group) if code == 0)
    if action == "cancel":
        return sum(1 for code in q.remove(topic, ids, event="cancelled", states=[state], actor=actor, group=group,
                                          hold=hold) if code == 0)
    if action == "cancel_running":
        return sum(1 for code in q.cancel_many(topic, ids, states=[state], actor=actor, group=group, hold=hold)
                   if code == 0)
    if action == "delete":
        return q.delete(topic, ids, state=state, actor=actor, group=group, hold=hold)
    raise ValueError(f"no engine call for action {action!r}")


def replay(topic: str, ids: list[str], actor: str, group: str = DEFAULT_GROUP) -> int:
    return get_queue().replay(topic, ids, actor=actor, group=group)


def replay_edited(topic: str, msg_id: str, payload: str, seen: str, actor: str, group: str = DEFAULT_GROUP) -> str:
    """The id replayed (a new one when other groups still share the original). Raises
    StateConflict (someone changed or moved it first) or PayloadTooLarge."""
    return get_queue().replay_edited(topic, msg_id, payload, seen, actor=actor, group=group)


def dead_count(topic: str, scope: dict) -> int:
    """Dead letters in a replay scope now (group, error group, died in [since_ms, cutoff_ms]); for
    a batch's, its members that ended dead in the group (an upper bound: deleted ones count)."""
    if scope.get("batch"):
        return dead_in_batch(topic, scope["batch"], scope.get("group", DEFAULT_GROUP))
    return get_queue().dead_count(topic, scope["fingerprint"] or None, scope["since_ms"], scope["cutoff_ms"],
                                  group=scope.get("group", DEFAULT_GROUP))


def purge_scope(topic: str, state: MessageState, group: str = DEFAULT_GROUP) -> tuple[int, dict | None]:
    """(count now, the scope a purge of it would have: group, cutoff and Redis's time now), scope
    None when the state is empty. InvalidArgument for unacked."""
    q = get_queue()
    count = q.counts(topic, group=group)[state]
    cutoff = q.purge_cutoff(topic, state, group=group)
    if cutoff is None:
        return count, None
    return count, {"group": group, "state": state.value, "cutoff": cutoff, "confirmed_ms": q.server_ms()}


@dataclass
class BulkRun:
    """What one run of a bulk operation carries from one batch to the next."""

    size: int                      # messages per batch (one script call)
    actor: str
    after: str | None = None       # a walking kind's page cursor; None again when its walk is done
    skips: dict[int, int] = field(default_factory=dict)   # purge: later arrivals stepped over
    walking: bool = False          # a query's matches: walks its search cursor whatever the kind
    hold: str | None = None        # the holding area what it removes goes to, for undo (services/undo.py)


def purge_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """(examined, deleted) of one bounded purge batch within ``scope`` (purge_scope)."""
    if scope.get("state") == MessageState.unacked.value:
        raise InvalidArgument("unacked messages cannot be purged")
    deleted, examined = get_queue().purge_batch(topic, scope["state"], cutoff=scope["cutoff"], batch=run.size,
                                                actor=run.actor, entered_before=scope.get("confirmed_ms"),
                                                skips=run.skips, group=scope.get("group", DEFAULT_GROUP),
                                                hold=run.hold)
    return examined, deleted


def replay_dead_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """(examined, moved) of one bounded replay batch within a replay scope."""
    if scope.get("batch"):
        return _replay_batch_members(topic, scope, run)
    return get_queue().replay_dead_batch(topic, scope.get("fingerprint") or None, cutoff=scope["cutoff_ms"],
                                         since=scope.get("since_ms") or 0, batch=run.size, actor=run.actor,
                                         group=scope.get("group", DEFAULT_GROUP))


def _replay_batch_members(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """One step of replaying a batch's dead letters: the next page of the group's dead letters in
    the batch's partition (a cursor walk: what it replays leaves the front, the rest stays), those
    dead by the scope's cutoff that are members of the batch replayed compare-and-set."""
    q = get_queue()
    group = scope.get("group", DEFAULT_GROUP)
    run.walking = True
    page = q.page(topic, MessageState.dead, limit=run.size, after=run.after, group=group,
                  partition=scope["partition"])
    ids = [m.id for m in page.messages if m.dead_at and m.dead_at.timestamp() * 1000 <= scope["cutoff_ms"]]
    members = q.batch_members(topic, scope["batch"], ids)
    run.after = page.next_cursor
    return len(page.messages), (q.replay(topic, members, actor=run.actor, group=group) if members else 0)


def reschedule_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """One batch of "reschedule all" (see walk). A message already at the new due time is not
    rescheduled again when the walk meets it a second time."""
    due = datetime.fromtimestamp(scope["due_ms"] / 1000, tz=UTC)

    def reschedule(q, ids, state, group):
        return q.reschedule_many(topic, ids, at=due, actor=run.actor, group=group, states=[state])

    return walk(topic, scope, run, reschedule, skip_score=scope["due_ms"])


def kill_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """One batch of "kill all" (see walk)."""
    def kill(q, ids, state, group):
        return q.kill_many(topic, ids, actor=run.actor, group=group, hold=run.hold)

    return walk(topic, scope, run, kill)


def walk(topic: str, scope: dict, run: BulkRun, act, skip_score: int | None = None) -> tuple[int, int]:
    """The next ``run.size`` messages of the scope's state (from cursor ``run.after``) due by its
    cutoff, acted on compare-and-set by ``act`` (which returns a code per id, 0 = done), except
    those already due at ``skip_score``. Returns (examined, moved) and leaves the next cursor in
    ``run.after``, None when the scope is done."""
    q = get_queue()
    group, state = scope.get("group", DEFAULT_GROUP), MessageState(scope["state"])
    page = q.page(topic, state, limit=run.size, after=run.after, group=group)
    ids, last_score = [], None
    for m in page.messages:
        due = m.due_at
        score = round(due.timestamp() * 1000) if due else None
        if score is not None and score > scope["cutoff_ms"]:
            run.after = None
            return len(ids), _moved(act(q, ids, state, group) if ids else [])
        if skip_score is None or score != skip_score:
            ids.append(m.id)
        last_score = score
    moved = _moved(act(q, ids, state, group) if ids else [])
    run.after = None if page.next_cursor is None or last_score is None else page.next_cursor
    return len(page.messages), moved


def _moved(codes) -> int:
    return sum(1 for c in codes if c == 0)


# A batch of "... all matching" scans this long at most (its script calls ~3 ms each), then acts.
MATCHING_BATCH_BUDGET_S = 0.5


def entered_ms(message) -> int:
    """When the message entered its state: its publish or its latest failure or operator action
    (the last history entry), whichever is later; the rule purge.lua applies."""
    times = [message.created_at] + [h.at for h in message.history[-1:] if h.event != "claimed"]
    return max((round(t.timestamp() * 1000) for t in times if t), default=0)


def matching_batch(topic: str, scope: dict, run: BulkRun, action: str, confirm) -> tuple[int, int]:
    """One batch of "... all matching" a query: the next matches (search from ``run.after``, at
    most ``run.size``, scores up to the scope's cutoff) that ``confirm`` accepts and that entered
    their state before the preview was confirmed, acted on compare-and-set by ``action``. What
    arrived later, or no longer matches, is left alone: only what the preview saw is acted on.
    Returns (matches, moved); ``run.after`` is None once the scan is over."""
    q = get_queue()
    group, state = scope.get("group", DEFAULT_GROUP), MessageState(scope["state"])
    run.walking = True
    confirmed = scope["confirmed_ms"]
    page = q.search(topic, state, scope["query"], group=group, partition=scope.get("partition"), after=run.after,
                    limit=run.size, since_ms=scope.get("since_ms"), until_ms=scope["cutoff_ms"],
                    budget_s=MATCHING_BATCH_BUDGET_S, confirm=lambda m: entered_ms(m) <= confirmed and confirm(m))
    ids = [m.id for m in page.messages]
    moved = act(action, topic, ids, state, run.actor, group=group, at_ms=scope.get("due_ms"), hold=run.hold) if ids else 0
    run.after = page.next_cursor
    return len(ids), moved
