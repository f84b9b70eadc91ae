"""Every kind of bulk operation (BulkOperation.action), declared once: the model's choices, the
permission that starting, cancelling or resuming it takes, its scope in words, its batch, how a
run knows it is done and what its page calls the messages it moved. The model, the views that
start operations, the task that runs them and the operation page all read this table.

A kind is the bulk form of the action of the same name in action_table, so its permission and its
verb are that action's: the two tables cannot disagree about who may replay, purge, reschedule or
kill. The one kind that acts on no messages (backfill, which publishes a schedule's past ticks)
names its own permission. Adding a kind is one entry here, its words in services.bulk and its batch in
services.operations (plus a migration, since the model's choices change).
"""

from collections.abc import Callable
from dataclasses import dataclass

from .action_table import ACTIONS, Action
from .services import bulk, operations
from .services.contracts import MAX_INDEX_ENTRIES
from .services.forecast import spread_batch, spread_words
from .services.indexes import index_build_batch, index_words
from .services.operations import BulkRun
from .services.schedules import backfill_batch
from .services.undo import undo_batch, undo_words


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
    # A kind that is no message action's bulk form (a schedule's backfill) names its own permission.
    perm: str | None = None
    skipped_label: str = "Skipped (no longer there)"   # the operation page's words for what it skipped
    batch_size: int = 100
    # True: each batch's cursor (run.after) is stored with the operation and a resumed run starts
    # there, for a kind whose batches cannot tell what an earlier run did (a backfill: a tick
    # whose message was consumed meanwhile would be published again by a walk from the start).
    keeps_cursor: bool = False
    # True: what it removes is held for undo (services/undo.py), and its page offers "Undo".
    holds: bool = False
    # The permission an operation of this kind takes, from its scope (undo: its operation's kind's).
    scope_perm: Callable[[dict], str] | None = None

    @property
    def action(self) -> Action | None:
        return ACTIONS.get(self.name)

    @property
    def permission(self) -> str:
        return self.perm or self.action.perm

    def permission_for(self, scope: dict) -> str:
        return self.scope_perm(scope) if self.scope_perm else self.permission

    def finished(self, run: BulkRun, examined: int) -> bool:
        """Whether the batch just run was the operation's last."""
        return run.after is None if self.walks or run.walking else examined < run.size


# The per-message action each kind takes on a query's matches ("... all matching"; the scope holds
# the query): the kind's own, except purge, which deletes dead letters and cancels the others.
MATCHING_ACTIONS = {"replay": "replay", "purge": "delete", "reschedule": "reschedule", "kill": "kill"}


# The URL's action ("... all matching") -> the kind of operation that runs it.
KIND_OF_MATCHING = {"replay": "replay", "delete": "purge", "cancel": "purge", "reschedule": "reschedule",
                    "kill": "kill"}


def matching_action(kind: str, state: str) -> str:
    action = MATCHING_ACTIONS[kind]
    return "cancel" if action == "delete" and state != "dead" else action


def matching_available(state, perms: dict) -> list[Action]:
    """The "... all matching" actions a user may start on a tab of ``state``."""
    return [ACTIONS[a] for a, k in KIND_OF_MATCHING.items()
            if ACTIONS[a].applies(state) and perms.get(KINDS[k].permission)]


def _or_matching(kind: str, batch):
    """``batch``, or for a scope with a query the walk over its matches (services.operations)."""
    def run_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
        if not scope.get("query"):
            return batch(topic, scope, run)
        from .finding import matches_as_shown  # the redacted view decides, as on the page

        return operations.matching_batch(topic, scope, run, matching_action(kind, scope["state"]),
                                         matches_as_shown(topic, scope["query"]))
    return run_batch


def _or_matching_words(words):
    return lambda topic, scope: bulk.matching_words(topic, scope) if scope.get("query") else words(topic, scope)


KINDS: dict[str, OperationKind] = {k.name: k for k in (
    OperationKind("replay", "replay dead letters", "Replayed", walks=False, rate=500,
                  words=_or_matching_words(bulk.replay_scope_words),
                  batch=_or_matching("replay", operations.replay_dead_batch)),
    # Purge takes only what was in the state when the operator confirmed (the scope's confirmed_ms):
    # later arrivals with an earlier score are kept and stepped over (BulkRun.skips).
    OperationKind("purge", "purge a state", "Deleted", walks=False, rate=50_000,
                  words=_or_matching_words(bulk.purge_words), batch=_or_matching("purge", operations.purge_batch),
                  holds=True),
    OperationKind("reschedule", "reschedule a state", "Rescheduled", walks=True, rate=5_000,
                  words=_or_matching_words(bulk.reschedule_words),
                  batch=_or_matching("reschedule", operations.reschedule_batch)),
    OperationKind("kill", "kill retrying messages", "Killed", walks=True, rate=5_000,
                  words=_or_matching_words(bulk.kill_words), batch=_or_matching("kill", operations.kill_batch),
                  holds=True),
    # Spaces what is due within a window evenly over it, in due order; walked from the window's end
    # down with the cursor kept, so the walk never meets what it moved later (services.forecast).
    OperationKind("spread", "spread pending messages over a window", "Spread", walks=True, rate=5_000,
                  words=spread_words, batch=spread_batch, keeps_cursor=True),
    # Publishes a schedule's past ticks (one message each, to every group of the topic): running
    # one publishes, as run now does. Batches of 10 with the cursor kept: a worker killed between a
    # batch's publishes and its progress write repeats at most those 10 ticks when resumed, and of
    # them only the ones whose message was consumed meanwhile (the others meet their dedup key).
    OperationKind("backfill", "backfill a schedule's ticks", "Published", walks=True, rate=100,
                  words=bulk.backfill_words, batch=backfill_batch, perm="publish_message",
                  skipped_label="Skipped (its message was still there)", batch_size=10, keeps_cursor=True),
    # Lists a topic's messages in its newly declared indexed fields (started by the admin's save):
    # a step is one HSCAN of a partition's records; resumed at its cursor.
    OperationKind("index_build", "build a topic's indexed fields", "Listed", walks=True, rate=50_000,
                  words=index_words, batch=index_build_batch, perm="manage_topics", keeps_cursor=True,
                  skipped_label=f"Listed in part (only the first {MAX_INDEX_ENTRIES} values of its indexed fields)",
                  batch_size=500),
    # Puts back what a purge or kill operation held (services/undo.py): takes the permission of
    # that operation's own kind; walks the holding area partition by partition. Idempotent, so a
    # resumed run starts over and puts nothing back twice.
    OperationKind("undo", "undo an operation", "Put back", walks=True, rate=5_000, words=undo_words,
                  batch=undo_batch, perm="purge_topic", scope_perm=lambda scope: KINDS[scope["kind"]].permission,
                  skipped_label="Not put back (its id or key is in use again, or no longer dead)"),
)}

CHOICES = [(k.name, k.choice) for k in KINDS.values()]
