"""Undo of destructive operations (issue #38 point 5), as the dashboard asks the engine for it:
purge and kill operations hold what they remove (BulkRun.hold, passed to the engine's calls) in a
holding area named after the operation; an undo operation walks it back, one script call per batch
(q.undo_batch), and the Operations page says until when each can be undone (q.held)."""

from dataclasses import dataclass
from datetime import datetime

from queue_core import HoldExpired

from .contracts import DEFAULT_GROUP
from .engine import get_queue


def hold_of(op_id: int) -> str:
    """The holding area's name of dashboard operation ``op_id`` (one name for the engine and here)."""
    return f"op-{op_id}"


def undo_token(op_id: int) -> str:
    """The single-use token of operation ``op_id``'s undo: one undo per operation, ever (views_undo
    starts it; a resume is refused once it exists, actions.resume_operation)."""
    return f"undo:{op_id}"


@dataclass(frozen=True)
class Undoable:
    until: datetime      # after this, nothing can be undone
    messages: int        # held now
    not_held: int        # destroyed without a copy (the holding area was full)
    operation: int = 0   # the operation it undoes
    state: str = ""      # the state its messages left (purge: the purged tab's; kill: retrying)

    @property
    def question(self) -> str:
        """What the Undo button asks before it starts the undo (the console's confirmation of a
        destructive action): what goes back, how many and where, from what is known now."""
        where = f"{self.state} (the state they left)" if self.state else "the state each left"
        lost = (f" {self.not_held:,} destroyed without a copy cannot be put back." if self.not_held else "")
        return (f"Undo operation #{self.operation}? It puts {self.messages:,} message{'s' if self.messages != 1 else ''}"
                f" back in {where}; one whose id or key is in use again stays out.{lost}")


def left_state(op) -> str:
    """The state the messages of a purge or kill operation left (its scope's; a kill takes retrying)."""
    return op.scope.get("state") or ("retrying" if op.action == "kill" else "")


def undoable(ops) -> dict[int, Undoable]:
    """{operation id: what it holds now} for the given operations that still hold something, or
    destroyed some without a copy (one q.held per topic): an area whose messages were all put
    back stays, empty, until it expires."""
    q = get_queue()
    wanted = {(op.topic, op.group, hold_of(op.pk)): op.pk for op in ops}
    by_pk = {op.pk: op for op in ops}
    out = {}
    for topic in {t for t, _, _ in wanted}:
        for h in q.held(topic):
            if (h.messages or h.not_held) and (pk := wanted.get((topic, h.group, h.operation))) is not None:
                out[pk] = Undoable(h.until, h.messages, h.not_held, pk, left_state(by_pk[pk]))
    return out


def undo_batch(topic: str, scope: dict, run) -> tuple[int, int]:
    """One script call of an undo operation: ``run.after`` is "<partition>:<HSCAN cursor>" (None
    to start), None again once every partition is walked. Idempotent: a message put back leaves the
    holding area in the same call, so a resumed run starting over puts nothing back twice.
    HoldExpired (said on the operation's page) when the first partition has no holding area."""
    q = get_queue()
    partition, cursor = (run.after or "0:0").split(":", 1)
    partition = int(partition)
    step = q.undo_batch(topic, scope["hold"], partition=partition, cursor=cursor, batch=run.size, actor=run.actor,
                        group=scope.get("group", DEFAULT_GROUP))
    if step.expired and partition == 0 and cursor == "0":
        raise HoldExpired(f"operation #{scope['undoes']} can no longer be undone: what it removed was kept "
                          f"{q.hold_keep / 3600:g} h and that time is over")
    if step.cursor is not None:
        run.after = f"{partition}:{step.cursor}"
    elif partition + 1 < q.layout(topic).partitions:
        run.after = f"{partition + 1}:0"
    else:
        run.after = None
    return step.restored + len(step.refused), step.restored


def undo_words(topic: str, scope: dict) -> str:
    return (f"what {scope['kind']} operation #{scope['undoes']} removed from group "
            f"{scope.get('group', DEFAULT_GROUP)} in {topic}, each put back in the state it left")
