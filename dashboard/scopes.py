"""The scope of a bulk replay travels from its preview to its confirmation as a signed token.

The browser never states what to replay: the preview signs the scope it showed (topic, consumer
group, error group, time range, cutoff) for the user who saw it, and the confirmation accepts only that token,
unexpired and unchanged. The number of dead letters is counted again by the server at confirmation.
"""

from django.core import signing

from .services.contracts import DEFAULT_GROUP

SALT = "delayq.replay-scope"
MAX_AGE = 3600   # seconds a preview stays confirmable


class ScopeInvalid(ValueError):
    pass


def sign(topic: str, user, scope: dict) -> str:
    return signing.dumps({"topic": topic, "user": user.pk, **scope}, salt=SALT, compress=True)


def read(token: str, topic: str, group: str, user) -> dict:
    """The scope signed for ``topic``, its consumer ``group`` and ``user``; ScopeInvalid when
    forged, altered, expired or another's."""
    try:
        data = signing.loads(token or "", salt=SALT, max_age=MAX_AGE)
    except signing.SignatureExpired:
        raise ScopeInvalid("this preview is more than an hour old: open the preview again") from None
    except signing.BadSignature:
        raise ScopeInvalid("the replay scope is missing or was altered: open the preview again") from None
    if data.get("topic") != topic or data.get("user") != user.pk or data.get("group", DEFAULT_GROUP) != group:
        raise ScopeInvalid("this preview was made for another topic, group or user: open the preview again")
    return {"group": group, "fingerprint": data["fingerprint"], "since_ms": data["since_ms"],
            "cutoff_ms": data["cutoff_ms"]}
