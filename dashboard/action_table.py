"""Every operator action on messages, declared once: its permission(s), the states it applies
to, its labels, its confirmation and its audit name. The topic tab, the message page, the views
that carry the actions out and the audit log all read this table, so they cannot disagree about
what applies where. ``row`` actions act on selected messages through one view (message_action);
the others have a flow of their own (a typed confirmation, an editor, a reveal) that checks its
entry here.

Adding an action is one entry here plus its engine call in ``services.operations.act``. An action
with a bulk form run as an operation (replay all matching, purge, reschedule all, kill all) also has
an entry of the same name in ``operation_kinds``, which takes its permission and its label from here.
"""

from dataclasses import dataclass

from .services.contracts import MessageState

S = MessageState


@dataclass(frozen=True)
class Action:
    name: str
    perm: str
    states: frozenset[MessageState]
    label: str                 # a row's button
    bulk_label: str            # the selection's button
    done: str                  # "Replayed 3 messages"
    confirm: str = ""          # asked before a destructive action
    readable: bool = False     # needs a readable record (not for corrupt rows)
    row: bool = True           # a per-message button handled by message_action
    also: tuple[str, ...] = () # further permissions it needs
    audit_name: str = ""
    needs_time: bool = False   # takes the new due time from the form (reschedule_at)

    @property
    def audit(self) -> str:
        return self.audit_name or f"message.{self.name}"

    @property
    def perms(self) -> tuple[str, ...]:
        return (self.perm, *self.also)

    def applies(self, state: MessageState | str) -> bool:
        return MessageState(state) in self.states

    def allowed(self, perms: dict[str, bool]) -> bool:
        return all(perms.get(p) for p in self.perms)


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("replay", "replay_message", frozenset({S.dead}), "Replay", "Replay selected", "Replayed", readable=True),
    Action("deliver_now", "replay_message", frozenset({S.pending, S.retrying}), "Deliver now",
           "Deliver selected now", "Delivered now", readable=True),
    Action("cancel", "delete_message", frozenset({S.pending, S.ready, S.retrying}), "Cancel", "Cancel selected",
           "Cancelled", confirm="Cancel the selected messages? They will not be delivered, and this cannot be "
                                "undone (selected rows are not held for undo)."),
    # Stops work in progress: the worker holding the lease hears of it within a second and the
    # message becomes a dead letter "cancelled by <user>" (DelayQueue.cancel(..., running=True)).
    Action("cancel_running", "delete_message", frozenset({S.unacked}), "Cancel", "Cancel selected", "Cancelled",
           confirm="Cancel the selected running messages? Their handlers are stopped and they become dead "
                   "letters (replayable)."),
    Action("delete", "delete_message", frozenset({S.dead}), "Delete", "Delete selected", "Deleted",
           confirm="Delete the selected dead letters? This cannot be undone."),
    Action("reschedule", "replay_message", frozenset({S.pending, S.retrying}), "Reschedule",
           "Reschedule selected", "Rescheduled", needs_time=True),
    # Spaces every pending message evenly over a window (the opposite of reschedule all): a flow of
    # its own (preview with the window, then an operation), started from the pending tab or the forecast.
    Action("spread", "replay_message", frozenset({S.pending}), "Spread", "Spread all…", "Spread", row=False,
           audit_name="spread_operation.start"),
    Action("kill", "delete_message", frozenset({S.retrying}), "Kill", "Kill selected", "Killed",
           confirm="Move the selected messages to the dead-letter queue now, without their remaining retries? "
                   "This cannot be undone (a replay from the dead letters runs them again)."),
    Action("edit_replay", "replay_message", frozenset({S.dead}), "Edit and replay…", "", "Edited and replayed",
           readable=True, row=False, also=("view_payload",), audit_name="message.edit_replay"),
    Action("purge", "purge_topic", frozenset({S.pending, S.ready, S.retrying, S.dead}), "Purge", "Purge all",
           "Purged", confirm="Type the number of messages to confirm.", row=False, audit_name="purge_operation.start"),
    Action("reveal", "view_payload", frozenset(MessageState), "Reveal in full", "", "Revealed", row=False,
           audit_name="payload.reveal"),
)}


def available(state: MessageState | str, perms: dict[str, bool], *, row: bool = True) -> list[Action]:
    """The actions a user with ``perms`` (access.user_perms) may take on messages in ``state``
    (row actions, or with row=False the ones with a flow of their own)."""
    return [a for a in ACTIONS.values() if a.row == row and a.applies(state) and a.allowed(perms)]


def may(name: str, state: MessageState | str | None, perms: dict[str, bool]) -> bool:
    action = ACTIONS[name]
    return action.allowed(perms) and (state is None or action.applies(state))

