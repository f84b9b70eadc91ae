"""The API tokens page: each user creates and revokes their own personal tokens for the JSON API.
A new token is shown once, in the answer to the form that created it (``Cache-Control: no-store``);
only its digest is stored, and the secret never goes into the session or any other store. The form
carries a one-time nonce (kept in the session: it is not secret), so sending it again (a reload, the
back button) cannot create a second token.

A token may be narrowed when it is made: read-only or publish-only, and to a list of topics
(ApiToken.access, ApiToken.topics); the API enforces both on every request."""

import secrets
import shlex
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone

from . import audit
from .access import require
from .models import ApiToken
from .services.contracts import InvalidTopic, validate_topic

MAX_LIVE_TOKENS = 20
MAX_TOPICS = 50
FORM_NONCE = "delayq_token_form"


@require("view_queue")
def token_list(request):
    if request.method == "POST":
        return _create(request)
    return _page(request)


def curl_examples(request, secret: str | None) -> dict[str, str]:
    """Ready-to-run curl lines against this site's API (as the browser reached it), with the new
    token in them when one was just made, else a shell variable to set."""
    token = secret or "$DELAYQ_TOKEN"
    auth = f'-H "Authorization: Bearer {token}"'
    topics = request.build_absolute_uri(reverse("delayq:api_topics"))
    publish = request.build_absolute_uri(reverse("delayq:api_publish", args=["TOPIC"]))
    return {"list": f"curl {auth} {shlex.quote(topics)}",
            "publish": f"curl {auth} -H 'Content-Type: application/json' "
                       f"""-d '{{"payload": {{"hello": "world"}}, "delay": 30}}' {shlex.quote(publish)}"""}


def _page(request, secret: str | None = None, status: int = 200):
    nonce = secrets.token_urlsafe(16)
    request.session[FORM_NONCE] = nonce
    tokens = ApiToken.objects.filter(user=request.user).select_related("user")
    response = render(request, "delayq/tokens.html", {"tokens": tokens, "secret": secret, "nonce": nonce,
                                                      "access_choices": ApiToken.Access.choices,
                                                      "curl": curl_examples(request, secret)}, status=status)
    response["Cache-Control"] = "no-store"      # a new secret must not stay in any cache
    return response


def _topics(text: str) -> list[str]:
    """The topic names of the form's comma- or space-separated list; ValueError naming a bad one."""
    names = list(dict.fromkeys(t for t in text.replace(",", " ").split() if t))
    if len(names) > MAX_TOPICS:
        raise ValueError(f"Topics: at most {MAX_TOPICS} names (or none for every topic).")
    for name in names:
        try:
            validate_topic(name)
        except InvalidTopic as exc:
            raise ValueError(f"Topics: {exc}") from None
    return names


def _create(request):
    if not secrets.compare_digest(request.POST.get("nonce", ""), request.session.pop(FORM_NONCE, None) or "-"):
        messages.warning(request, "This form was sent already (a reload or the back button?), so no token was "
                                  "created now; a token is shown only once: create another if you lost it.")
        return _page(request, status=409)
    name = (request.POST.get("name") or "").strip()
    days = (request.POST.get("days") or "").strip()
    access = request.POST.get("access") or ApiToken.Access.FULL
    if not name or len(name) > 100:
        messages.error(request, "Give the token a name of 1 to 100 characters (what will use it).")
        return _page(request, status=400)
    if days and (not (days.isascii() and days.isdigit()) or not 1 <= int(days) <= 3650):
        messages.error(request, "Expiry: a whole number of days from 1 to 3650, or empty for none.")
        return _page(request, status=400)
    if access not in ApiToken.Access.values:
        messages.error(request, f"Access: one of {', '.join(ApiToken.Access.values)}.")
        return _page(request, status=400)
    try:
        topics = _topics(request.POST.get("topics") or "")
    except ValueError as exc:
        messages.error(request, str(exc))
        return _page(request, status=400)
    token = ApiToken(user=request.user, name=name, access=access, topics=topics,
                     expires=timezone.now() + timedelta(days=int(days)) if days else None)
    with transaction.atomic():
        # Lock the owner's row before counting, so concurrent creations count one after another:
        # an UPDATE holds the row lock on PostgreSQL and MySQL, and on SQLite takes the database's
        # write lock at once (select_for_update would be ignored there, and a deferred transaction
        # that read first fails with "database is locked" when it then writes).
        user_model = get_user_model()
        user_model.objects.filter(pk=request.user.pk).update(**{user_model._meta.pk.attname: F("pk")})
        live = ApiToken.objects.filter(user=request.user, revoked__isnull=True).count()
        if live >= MAX_LIVE_TOKENS:
            messages.error(request, f"You have {live} live tokens: revoke one first.")
            return _page(request, status=400)
        secret = token.issue()
        token.save()
    audit.record(request.user, "token.create", scope={"token": str(token), "token_scope": token.scope_words},
                 detail=f"expires {token.expires:%Y-%m-%d %H:%M} UTC" if token.expires else "no expiry")
    return _page(request, secret=secret, status=201)


@require("view_queue")
def token_revoke(request, token_id: int):
    """GET: the question, a page of its own so it is asked with or without JavaScript. POST: revoke."""
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)   # someone else's: 404
    if request.method != "POST":
        return render(request, "delayq/token_revoke.html", {"token": token})
    if token.revoke():
        audit.record(request.user, "token.revoke", scope={"token": str(token)})
        messages.success(request, f"Revoked {token}: requests with it are refused from now on.")
    else:
        messages.info(request, f"{token} was revoked already.")
    return redirect("delayq:tokens")
