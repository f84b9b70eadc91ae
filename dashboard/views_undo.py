""""Undo operation #N" (issue #38 point 5): puts back what a purge or kill operation removed, as
an operation of its own (operation_kinds "undo"), while its holding area lasts. The permission is
the undone operation's own kind's, checked here on the server; a second click finds the undo
already started (one per operation: its scope token) and starts nothing twice."""

from django.contrib import messages
from django.db import transaction
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from . import audit
from .access import require
from .actions import ScopeUsed, _operation_for, operation_started_by, start_operation
from .operation_kinds import KINDS
from .services.contracts import QueueError, Unavailable
from .services.undo import hold_of, undo_token, undoable


@transaction.non_atomic_requests
@require_POST
@require("view_queue")
def undo_operation(request, op_id):
    op = _operation_for(request, op_id)   # the permission of its kind (PermissionDenied: 403)
    back = redirect("delayq:operation", op_id=op.pk)

    def refuse(why: str):
        audit.record(request.user, "undo_operation.start", topic=op.topic, group=op.group, result="refused",
                     detail=f"operation #{op.pk}: {why}")
        messages.error(request, why)
        return back

    if not op.kind.holds:
        return refuse(f"Operation #{op.pk} ({op.action}) removes nothing, so there is nothing to undo.")
    if op.active:
        return refuse(f"Operation #{op.pk} is still {op.status}; cancel it or let it finish, then undo it.")
    done = operation_started_by(undo_token(op.pk))
    if done is not None and not done.active:
        return refuse(f"Operation #{op.pk} was undone already, by operation #{done.pk} ({done.status}); an operation "
                      "is undone once. " + (f"Resume operation #{done.pk} to finish it." if done.status == "failed"
                                            else "What it did not put back is listed on its page."))
    try:
        held = undoable([op]).get(op.pk)
    except (QueueError, Unavailable) as exc:
        return refuse(f"Redis could not say what operation #{op.pk} holds: {exc}")
    if held is None or held.messages == 0:
        return refuse(f"Operation #{op.pk} can no longer be undone: what it removed was kept for a limited time "
                      "(24 h by default) and that time is over, or everything was put back already.")
    scope = {"undoes": op.pk, "kind": op.action, "hold": hold_of(op.pk)}
    try:
        undo = start_operation(request, op.topic, op.group, KINDS["undo"], scope, held.messages, KINDS["undo"].rate,
                               token=undo_token(op.pk))
    except ScopeUsed as used:
        messages.info(request, f"Operation #{op.pk} is already being undone (operation #{used.op.pk}); "
                               "nothing was started twice.")
        return redirect("delayq:operation", op_id=used.op.pk) if used.op else back
    if undo is None:
        return back
    messages.success(request, f"Undo operation #{undo.pk} started: {held.messages:,} messages of operation #{op.pk} "
                              "go back to the state they left.")
    return redirect("delayq:operation", op_id=undo.pk)
