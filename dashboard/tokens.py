"""The API tokens page: each user creates and revokes their own personal tokens for the JSON API.
A new token is shown once; only its digest is stored. Creating redirects (post/redirect/get) so a
reload cannot create a second token: the secret waits in the session for that one redirected page,
which removes it."""

from datetime import timedelta

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from . import audit
from .access import require
from .models import ApiToken

MAX_LIVE_TOKENS = 20
NEW_SECRET = "delayq_new_api_token"


@require("view_queue")
def token_list(request):
    if request.method == "POST":
        return _create(request)
    return _page(request, secret=request.session.pop(NEW_SECRET, None))


def _page(request, secret: str | None = None, status: int = 200):
    tokens = ApiToken.objects.filter(user=request.user)
    return render(request, "delayq/tokens.html", {"tokens": tokens, "secret": secret}, status=status)


def _create(request):
    name = (request.POST.get("name") or "").strip()
    days = (request.POST.get("days") or "").strip()
    if not name or len(name) > 100:
        messages.error(request, "Give the token a name of 1 to 100 characters (what will use it).")
        return _page(request, status=400)
    if days and (not days.isdigit() or not 1 <= int(days) <= 3650):
        messages.error(request, "Expiry: a whole number of days from 1 to 3650, or empty for none.")
        return _page(request, status=400)
    live = ApiToken.objects.filter(user=request.user, revoked__isnull=True).count()
    if live >= MAX_LIVE_TOKENS:
        messages.error(request, f"You have {live} live tokens: revoke one first.")
        return _page(request, status=400)
    token = ApiToken(user=request.user, name=name,
                     expires=timezone.now() + timedelta(days=int(days)) if days else None)
    secret = token.issue()
    token.save()
    audit.record(request.user, "token.create", scope={"token": str(token)},
                 detail=f"expires {token.expires:%Y-%m-%d %H:%M} UTC" if token.expires else "no expiry")
    request.session[NEW_SECRET] = secret
    return redirect("delayq:tokens")


@require_POST
@require("view_queue")
def token_revoke(request, token_id: int):
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)   # someone else's: 404
    if token.revoke():
        audit.record(request.user, "token.revoke", scope={"token": str(token)})
        messages.success(request, f"Revoked {token}: requests with it are refused from now on.")
    else:
        messages.info(request, f"{token} was revoked already.")
    return redirect("delayq:tokens")
