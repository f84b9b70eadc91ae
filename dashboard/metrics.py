"""The Prometheus scrape endpoint: off unless DELAYQ_METRICS is on; then a bearer token
(DELAYQ_METRICS_TOKEN) or a logged-in user with view_queue may read it. Answers are plain text,
errors too (a scraper follows no login redirect)."""

import hmac

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET

from . import conf
from .access import REDIS_DOWN, can
from .services.contracts import Unavailable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _authorized(request) -> bool:
    token = conf.metrics_token()
    scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
    if token and scheme.lower() == "bearer":          # auth schemes are case-insensitive (RFC 9110 11.1)
        return hmac.compare_digest(credentials.strip().encode(), token.encode())
    return can(request.user, "view_queue")


@require_GET
def metrics(request):
    if not conf.metrics_enabled():
        raise Http404("metrics are off: set DELAYQ_METRICS")
    if not _authorized(request):
        response = HttpResponse("send Authorization: Bearer <DELAYQ_METRICS_TOKEN>, or log in with the view_queue "
                                "permission\n", status=401, content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="delayq metrics"'
        return response
    from .services.metrics import exposition

    try:
        body = exposition(conf.metrics_refresh())
    except Unavailable as exc:
        return HttpResponse(REDIS_DOWN.format(exc) + "\n", status=503, content_type="text/plain; charset=utf-8")
    return HttpResponse(body, content_type=CONTENT_TYPE)
