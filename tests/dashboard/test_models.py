import pytest
from django.core.exceptions import ValidationError

from dashboard.models import AuditEntry, RetryPolicy, Topic
from dashboard.redaction import MASK, redact, redact_payload
from queue_core import RetryPolicy as EngineRetryPolicy

pytestmark = pytest.mark.django_db


def policy(**kw):
    fields = dict(name="p", kind="exponential", base_delay=1, factor=2, max_delay=300, jitter=0, max_attempts=5)
    return RetryPolicy(**{**fields, **kw})


@pytest.mark.parametrize("kw, field, text", [
    (dict(base_delay=-1), "base_delay", "cannot be negative"),
    (dict(factor=0.5), "factor", "at least 1"),
    (dict(kind="custom", schedule=[]), "schedule", "at least one delay"),
    (dict(kind="custom", schedule=[1, -2]), "schedule", "cannot be negative"),
    (dict(kind="custom", schedule="1,2"), "schedule", "list of seconds"),
    (dict(max_attempts=0), "max_attempts", "at least 1"),
    (dict(jitter=1.5), "jitter", "between 0 and 1"),
    (dict(kind="fixed", schedule=[1]), "schedule", "only by the custom kind"),
])
def test_nonsense_policies_are_refused_per_field(kw, field, text):
    with pytest.raises(ValidationError) as info:
        policy(**kw).full_clean()
    assert text in " ".join(info.value.message_dict[field])


def test_preview_is_the_engines_schedule():
    p = policy(kind="custom", schedule=[1, 10, 60], max_delay=0, max_attempts=5)
    p.full_clean()
    engine = EngineRetryPolicy.custom([1, 10, 60], max_attempts=5)
    assert p.to_engine() == engine
    assert p.preview == engine.describe() == \
        "1 s, 10 s, 1 min, 1 min, then dead after 5 attempts; about 2 min 11 s in total"


def test_topic_name_follows_the_engine_rule():
    p = policy()
    p.save()
    with pytest.raises(ValidationError) as info:
        Topic(name="bad name", retry_policy=p).full_clean()
    assert "letter or digit first" in str(info.value)
    Topic(name="orders.eu-1", retry_policy=p).full_clean()


def test_topic_engine_config_mirrors_fields():
    p = policy(kind="fixed", base_delay=3, max_delay=0, max_attempts=2)
    p.save()
    t = Topic(name="t", retry_policy=p, visibility_timeout=12, dead_max_count=9, paused=True, events=False)
    cfg = t.engine_config()
    assert (cfg.visibility_timeout, cfg.dead_max_count, cfg.paused, cfg.events) == (12, 9, True, False)
    assert cfg.retry == EngineRetryPolicy.fixed(3, max_attempts=2)


def test_redaction_rules_are_validated():
    p = policy()
    p.save()
    with pytest.raises(ValidationError) as info:
        Topic(name="t", retry_policy=p, redaction_rules=["ok", "", ".bad"]).full_clean()
    assert "Not a key or dotted path" in str(info.value)


def test_redaction_masks_keys_anywhere_and_paths_exactly():
    data = {"password": "x", "user": {"password": "y", "card": {"number": "4111", "exp": "12/30"}},
            "items": [{"card": {"number": "5500"}}], "card": {"number": "1234"}}
    out = redact(data, ["password", "card.number"])
    assert out["password"] == MASK and out["user"]["password"] == MASK
    assert out["card"]["number"] == MASK and out["user"]["card"]["number"] == "4111"
    assert out["items"][0]["card"]["number"] == "5500"  # path is from the top; lists are walked at that level
    assert data["password"] == "x"  # original untouched


def test_non_json_payload_is_hidden_whole_when_rules_exist():
    text, hidden = redact_payload(b"\xffbinary", ["password"])
    assert hidden and "hidden" in text
    text, hidden = redact_payload(b"plain", [])
    assert text == "plain" and not hidden


def test_audit_entries_are_append_only(django_user_model):
    entry = AuditEntry.objects.create(username="x", action="test")
    entry.detail = "changed"
    with pytest.raises(ValidationError, match="append-only"):
        entry.save()
    with pytest.raises(ValidationError, match="append-only"):
        entry.delete()
    assert AuditEntry.objects.get(pk=entry.pk).detail == ""


def test_finding_publish_permission_says_only_the_json_api():
    """publish_message also allows the topic page's Publish form. Django writes a permission's name
    only when it creates the row (0006 did, with the old words): migration 0010 renames it, and the
    migrations still describe the model."""
    import io

    from django.contrib.auth.models import Permission
    from django.core.management import call_command

    from dashboard.models import QueueAccess

    wording = dict(QueueAccess._meta.permissions)["publish_message"]
    assert "Publish form" in wording and "JSON API" in wording
    assert Permission.objects.get(content_type__app_label="delayq", codename="publish_message").name == wording
    call_command("makemigrations", "delayq", "--check", "--dry-run", stdout=io.StringIO())
