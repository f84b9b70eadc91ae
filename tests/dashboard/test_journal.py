"""A message's progress and log (message.progress(), message.log(); DelayQueue.journal) on its
page, polled every 0.5 s while unacked, and in the JSON API's message detail: redacted by the
topic's rules for everyone who does not reveal."""

import pytest
from django.urls import reverse

from dashboard.models import RetryPolicy, Topic
from queue_core import MessageState

pytestmark = pytest.mark.django_db

CARD = "4111 1111 1111 1111"


@pytest.fixture
def running_message(site_queue, django_capture_on_commit_callbacks):
    """An unacked message whose handler reported progress and three log lines with secrets in them."""
    policy = RetryPolicy.objects.create(name="p")
    with django_capture_on_commit_callbacks(execute=True):
        Topic.objects.create(name="orders", retry_policy=policy, redaction_rules=["password"])
    site_queue.configure_topic("orders", visibility_timeout=60)
    mid = site_queue.publish("orders", {"user": "ann", "password": "hunter22"})
    [d] = site_queue.claim("orders", 1)
    d.message.progress(0.42, "step 3/7")
    d.message.log("logging in with hunter22")          # a value the payload's rules mask
    d.message.log("refresh api_token=tok-98765 done")  # a key the site's fragments name
    d.message.log(f"charged card {CARD}")
    assert site_queue.report([d]) == [0]
    return mid, d


def test_the_page_shows_progress_and_the_log_redacted_and_polls_while_unacked(viewer, running_message):
    mid, _d = running_message
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert 'hx-trigger="every 500ms"' in html and f'{mid}/?region=journal"' in html
    assert '<progress max="100" value="42">' in html and "step 3/7" in html
    assert "logging in with ••••••" in html and "api_token=•••••• done" in html and "charged card ••••••" in html
    assert "hunter22" not in html and "tok-98765" not in html and CARD not in html


def test_the_region_alone_for_htmx_and_its_poll_stops_when_the_message_is_done(viewer, site_queue,
                                                                              running_message):
    mid, d = running_message
    url = reverse("delayq:message", args=["orders", mid]) + "?region=journal"
    region = viewer.get(url, headers={"HX-Request": "true"}).content.decode()
    assert region.lstrip().startswith('<section id="journal"') and "<h1>" not in region
    assert 'hx-trigger="every 500ms"' in region and "[1] logging in with ••••••" in region
    d.message.log("one more line")
    site_queue.report([d])
    assert "[1] one more line" in viewer.get(url, headers={"HX-Request": "true"}).content.decode()
    site_queue.ack(d)
    gone = viewer.get(url, headers={"HX-Request": "true"})
    assert gone.status_code == 200 and "The message is gone" in gone.content.decode()
    assert "hx-trigger" not in gone.content.decode()


def test_a_failed_message_keeps_its_log_without_polling(viewer, site_queue, running_message):
    mid, d = running_message
    site_queue.nack(d, "boom")
    assert site_queue.get("orders", mid).state is MessageState.retrying
    html = viewer.get(reverse("delayq:message", args=["orders", mid])).content.decode()
    assert "charged card ••••••" in html and 'id="journal"' in html and "?region=journal" not in html


def test_a_message_without_reports_shows_the_section_only_while_unacked(viewer, site_queue):
    mid = site_queue.publish("orders", "quiet")
    page = reverse("delayq:message", args=["orders", mid])
    assert 'id="journal"' not in viewer.get(page).content.decode()
    site_queue.claim("orders", 1)
    assert "Nothing reported yet" in viewer.get(page).content.decode()


def test_the_api_message_detail_carries_the_journal_redacted(viewer, running_message):
    mid, _d = running_message
    data = viewer.get(reverse("delayq:api_message", args=["orders", mid])).json()
    assert data["state"] == "unacked"
    journal = data["journal"]
    assert journal["progress"] == 0.42 and journal["note"] == "step 3/7" and journal["progress_attempt"] == 1
    assert [line["text"] for line in journal["lines"]] == [
        "logging in with ••••••", "refresh api_token=•••••• done", "charged card ••••••"]
    assert all(line["at"] and line["attempt"] == 1 for line in journal["lines"])


def test_reveal_shows_the_log_in_full(admin_user, running_message):
    """A user with view_payload who reveals (a POST, audited) sees the lines as written."""
    mid, _d = running_message
    html = admin_user.post(reverse("delayq:message_reveal", args=["orders", mid])).content.decode()
    assert "logging in with hunter22" in html and "api_token=tok-98765" in html
    assert "?region=journal" not in html   # no poll: it would put the redacted lines back


def test_finding_log_secrets_are_masked_however_they_are_written(viewer, site_queue, running_message):
    """A review found 'Authorization: Bearer tok' masked only the scheme word, 'password => "x"'
    and a quoted value with an escaped quote passed, and a secret named in a later line (or in
    the note) showed in the earlier ones."""
    _mid, _ = running_message
    site_queue.publish("orders", {"n": 1})
    d = site_queue.claim("orders", 1)[0]
    d.message.progress(0.1, "resuming with s3cr3t-token-77")
    d.message.log("retrying with s3cr3t-token-77")
    d.message.log("Authorization: Bearer tok-abc123xyz")
    d.message.log('password => "pa55word-9"')
    d.message.log('password: "with \\"quote\\" pw-7788"')
    d.message.log("api_token=s3cr3t-token-77")
    site_queue.report([d])
    html = viewer.get(reverse("delayq:message", args=["orders", d.id])).content.decode()
    for secret in ("s3cr3t-token-77", "tok-abc123xyz", "pa55word-9", "pw-7788"):
        assert secret not in html, secret
    assert "retrying with ••••••" in html and "resuming with ••••••" in html


def test_finding_a_payload_hidden_as_unredactable_hides_its_log_too(viewer, site_queue, running_message):
    """A review found a log line repeating a payload the page hides (not JSON under explicit
    rules) was shown in full."""
    site_queue.publish("orders", b"<order><password>hunter99</password></order>")
    d = site_queue.claim("orders", 1)[0]
    d.message.log("processing <order><password>hunter99</password></order>")
    site_queue.report([d])
    html = viewer.get(reverse("delayq:message", args=["orders", d.id])).content.decode()
    assert "hunter99" not in html and "cannot be redacted for display" in html


def test_finding_unreadable_stored_progress_and_a_non_ascii_id_are_not_a_500(viewer, site_queue, running_message):
    """A review found a stored progress of nan (or out of range) was a 500 on the page and in the
    API, and an id ending in '.²' a 500 everywhere an id is read (partition_of)."""
    mid, d = running_message
    site_queue.redis.hset(site_queue.keys("orders", 0, "default").g.journal, f"{mid}|p", "nan|1|1|x")
    assert viewer.get(reverse("delayq:message", args=["orders", mid])).status_code == 200
    assert viewer.get(reverse("delayq:api_message", args=["orders", mid])).status_code == 200
    site_queue.redis.hset(site_queue.keys("orders", 0, "default").g.journal, f"{mid}|p", "7|99999999999999999|1|x")
    assert viewer.get(reverse("delayq:message", args=["orders", mid])).status_code == 200
    assert viewer.get(reverse("delayq:message", args=["orders", "01ABCDEFGH.²"])).status_code == 404
