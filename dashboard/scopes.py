"""The scope of a bulk operation (replay all matching, reschedule all, kill all) travels from its
preview to its confirmation as a signed token.

The browser never states what to act on: the preview signs the scope it showed (topic, consumer
group, error group, time range, cutoff, new due time) for the user who saw it, and the
confirmation accepts only that token, unexpired, unchanged and for the same kind of operation.
The number of messages is counted again by the server at confirmation.
"""

from django.core import signing

from .services.contracts import DEFAULT_GROUP

SALT = "delayq.replay-scope"
MAX_AGE = 3600   # seconds a preview stays confirmable


class ScopeInvalid(ValueError):
    pass


def sign(topic: str, user, scope: dict, kind: str = "replay") -> str:
    return signing.dumps({"topic": topic, "user": user.pk, "kind": kind, **scope}, salt=SALT, compress=True)


def read(token: str, topic: str, group: str, user, kind: str = "replay") -> dict:
    """The scope of a ``kind`` of operation signed for ``topic``, its consumer ``group`` and
    ``user``; ScopeInvalid when forged, altered, expired, another's or for another operation."""
    try:
        data = signing.loads(token or "", salt=SALT, max_age=MAX_AGE)
    except signing.SignatureExpired:
        raise ScopeInvalid("this preview is more than an hour old: open the preview again") from None
    except signing.BadSignature:
        raise ScopeInvalid("the replay scope is missing or was altered: open the preview again") from None
    if data.get("topic") != topic or data.get("user") != user.pk or data.get("group", DEFAULT_GROUP) != group:
        raise ScopeInvalid("this preview was made for another topic, group or user: open the preview again")
    if data.get("kind", "replay") != kind:
        raise ScopeInvalid(f"this preview was made for a {data.get('kind')}, not a {kind}: open the preview again")
    return {k: v for k, v in data.items() if k not in ("topic", "user", "kind")} | {"group": group}
