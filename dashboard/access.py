"""Access helpers: every view names the permission it needs; the server checks it on every request."""

from functools import wraps

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import JsonResponse
from django.shortcuts import render

from . import conf
from .services.contracts import InvalidArgument, InvalidTopic, Unavailable

REDIS_DOWN = "Redis is unreachable ({}). Check DELAYQ_REDIS_URL and that the server is running."

PERMS = ("view_queue", "view_payload", "replay_message", "delete_message", "purge_topic", "manage_topics", "run_analytics",
         "publish_message")


def can(user, perm: str) -> bool:
    return user.is_authenticated and user.has_perm(f"delayq.{perm}")


def engine_errors(view=None, *, as_json: bool = False):
    """One mapping of engine failures for every view: Redis unavailable -> 503, bad input that
    reached the engine (a malformed cursor, a bad range, an invalid topic) -> 400; the same text
    on pages and, for the API, as JSON."""
    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except Unavailable as exc:
                return _error(request, 503, REDIS_DOWN.format(exc), as_json)
            except (InvalidArgument, InvalidTopic) as exc:
                return _error(request, 400, str(exc), as_json)
        return wrapped
    return decorator(view) if view else decorator


def _error(request, status: int, text: str, as_json: bool):
    if as_json:
        return JsonResponse({"error": text}, status=status)
    return render(request, "delayq/error.html", {"status": status, "text": text}, status=status)


def require(perm: str):
    """Anonymous users go to the login page; logged-in users without ``perm`` get 403; engine
    failures map to one response each (engine_errors)."""
    def decorator(view):
        @wraps(view)
        @engine_errors
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
