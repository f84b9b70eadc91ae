"""Access helpers: every view names the permission it needs; the server checks it on every request."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied

from . import conf

PERMS = ("view_queue", "view_payload", "replay_message", "delete_message", "purge_topic", "manage_topics", "run_analytics")


def can(user, perm: str) -> bool:
    return user.is_authenticated and user.has_perm(f"delayq.{perm}")


def require(perm: str):
    """Anonymous users go to the login page; logged-in users without ``perm`` get 403."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path(), conf.login_url())
            if not can(request.user, perm):
                raise PermissionDenied(f"You need the '{perm}' permission for this.")
            return view(request, *args, **kwargs)
        return wrapped
    return decorator


def user_perms(user) -> dict[str, bool]:
    """For templates: which actions to show (the server checks again on every POST)."""
    return {p: can(user, p) for p in PERMS}
