"""Every kind of bulk operation (BulkOperation.action), declared once: the model's choices, the
permission that starting, cancelling or resuming it takes, its scope in words, its batch, how a
run knows it is done and what its page calls the messages it moved. The model, the views that
start operations, the task that runs them and the operation page all read this table.

A kind is the bulk form of the action of the same name in action_table, so its permission and its
verb are that action's: the two tables cannot disagree about who may replay, purge, reschedule or
kill. Adding a kind is one entry here, its words in services.bulk and its batch in
services.operations (plus a migration, since the model's choices change).
"""

from collections.abc import Callable
from dataclasses import dataclass

from .action_table import ACTIONS, Action
from .services import bulk, operations
from .services.operations import BulkRun


@dataclass(frozen=True)
class OperationKind:
    name: str          # BulkOperation.action as stored, and the action_table entry it is the bulk form of
    choice: str        # its label among the model's choices (changing it is a migration)
    moved_label: str   # the operation page's heading for what it moved
    # True: walks its state page by page with a cursor, done when the pages run out (the "… all"
    # previews of a state tab). False: takes bounded batches from the front, done when one comes
    # back short (what it moved has left the front).
    walks: bool
    rate: int          # messages per second it runs at (replay: the default the operator may change)
    words: Callable[[str, dict], str]                   # (topic, scope) -> its scope in words
    batch: Callable[[str, dict, BulkRun], tuple[int, int]]   # (topic, scope, run) -> (examined, moved)

    @property
    def action(self) -> Action:
        return ACTIONS[self.name]

    @property
    def permission(self) -> str:
        return self.action.perm

    def finished(self, run: BulkRun, examined: int) -> bool:
        """Whether the batch just run was the operation's last."""
        return run.after is None if self.walks else examined < run.size


KINDS: dict[str, OperationKind] = {k.name: k for k in (
    OperationKind("replay", "replay dead letters", "Replayed", walks=False, rate=500,
                  words=bulk.replay_scope_words, batch=operations.replay_dead_batch),
    # Purge takes only what was in the state when the operator confirmed (the scope's confirmed_ms):
    # later arrivals with an earlier score are kept and stepped over (BulkRun.skips).
    OperationKind("purge", "purge a state", "Deleted", walks=False, rate=50_000,
                  words=bulk.purge_words, batch=operations.purge_batch),
    OperationKind("reschedule", "reschedule a state", "Rescheduled", walks=True, rate=5_000,
                  words=bulk.reschedule_words, batch=operations.reschedule_batch),
    OperationKind("kill", "kill retrying messages", "Killed", walks=True, rate=5_000,
                  words=bulk.kill_words, batch=operations.kill_batch),
)}

CHOICES = [(k.name, k.choice) for k in KINDS.values()]
