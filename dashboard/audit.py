"""One AuditEntry per operator action: who, what, where (topic and consumer group), how many, and how
it ended."""

from .models import AuditEntry


def record(user, action: str, *, topic: str = "", group: str = "", scope: dict | None = None, requested: int | None = None,
           affected: int | None = None, message_ids: list[str] | None = None, result: str = "ok",
           detail: str = "", private: dict | None = None) -> AuditEntry:
    authenticated = user is not None and getattr(user, "is_authenticated", False)
    return AuditEntry.objects.create(
        user=user if authenticated else None,
        username=user.get_username() if authenticated else "system",
        action=action, topic=topic, group=group or (scope or {}).get("group", ""), scope=scope or {}, requested=requested, affected=affected,
        message_ids=(message_ids or [])[:100], result=result, detail=detail[:10_000], private=private or {},
    )
