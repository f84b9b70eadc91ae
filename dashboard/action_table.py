"""Every per-message operator action, declared once: its permission, the states it applies to,
its labels, its confirmation and its audit name. The topic tab, the message page, the action view
and the audit log all read this table, so they cannot disagree about what applies where.

Adding an action is one entry here plus its engine call in ``services.operations.act``.
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

    @property
    def audit(self) -> str:
        return f"message.{self.name}"

    def applies(self, state: MessageState | str) -> bool:
        return MessageState(state) in self.states


ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("replay", "replay_message", frozenset({S.dead}), "Replay", "Replay selected", "Replayed", readable=True),
    Action("deliver_now", "replay_message", frozenset({S.pending, S.retrying}), "Deliver now",
           "Deliver selected now", "Delivered now", readable=True),
    Action("cancel", "delete_message", frozenset({S.pending, S.ready, S.retrying}), "Cancel", "Cancel selected",
           "Cancelled", confirm="Cancel the selected messages? They will not be delivered."),
    Action("delete", "delete_message", frozenset({S.dead}), "Delete", "Delete selected", "Deleted",
           confirm="Delete the selected dead letters? This cannot be undone."),
)}


def available(state: MessageState | str, perms: dict[str, bool]) -> list[Action]:
    """The actions a user with ``perms`` (access.user_perms) may take on messages in ``state``."""
    return [a for a in ACTIONS.values() if a.applies(state) and perms.get(a.perm)]

