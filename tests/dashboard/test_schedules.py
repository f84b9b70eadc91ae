"""The Schedules page (schedules/) and its actions (schedules/<name>/<action>/): the list in
words with next fire times and recent ticks, and pause/resume/run now/delete with permissions,
CSRF and audit, against the session's real Redis."""

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import AuditEntry

pytestmark = pytest.mark.django_db


def _article(html: str, name: str) -> str:
    found = re.search(rf'<article class="schedule" data-schedule="{re.escape(name)}"[^>]*>(.*?)</article>', html, re.S)
    assert found, f"no schedule {name} on the page"
    return found.group(0)


@pytest.fixture
def nightly(site_queue):
    site_queue.configure_topic("reports")
    site_queue.upsert_schedule("nightly-report", topic="reports", cron="0 3 * * 1-5", tz="Europe/Berlin",
                               payload={"kind": "nightly"}, overlap="skip")
    return site_queue


def test_the_page_lists_schedules_in_words_with_their_next_times(viewer, nightly):
    """Each schedule shows its expression in words, the next 5 fire times and no actions for a viewer."""
    response = viewer.get(reverse("delayq:schedules"))
    assert response.status_code == 200
    article = _article(response.content.decode(), "nightly-report")
    assert "Weekdays at 03:00 Europe/Berlin" in article and 'data-state="active"' in article
    assert len(re.findall(r"<time ", re.search(r'data-testid="next">(.*?)</span>', article, re.S).group(1))) == 5
    assert "Pause</button>" not in article and "Run now</button>" not in article and "No ticks yet." in article


def test_a_fired_tick_links_to_its_message_and_says_where_it_is(viewer, nightly):
    """Run now puts a tick in the recent ticks, linked to the message it published, with the
    message's state now: ready, then dead, then done once it is gone."""
    msg_id = nightly.run_schedule_now("nightly-report")

    def shown_state():
        article = _article(viewer.get(reverse("delayq:schedules")).content.decode(), "nightly-report")
        assert f'href="/topics/reports/messages/{msg_id}/"' in article and 'data-outcome="run-now"' in article
        return re.search(r'data-testid="message-state">([a-z]+)<', article).group(1)
    assert shown_state() == "ready"
    [d] = nightly.claim("reports", 1)
    nightly.reject(d, "no")
    assert shown_state() == "dead"
    nightly.delete("reports", [msg_id])
    assert shown_state() == "done"


def test_admin_pauses_with_a_note_and_resumes_audited(admin_user, nightly):
    """Pause records the note and who paused; resume brings the next ticks back; both are audited."""
    url = reverse("delayq:schedule_action", args=["nightly-report", "pause"])
    response = admin_user.post(url, {"note": "migration <window>"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html and 'data-state="paused"' in _article(html, "nightly-report")
    assert "migration &lt;window&gt;" in html and "migration <window>" not in html   # escaped
    assert nightly.schedule("nightly-report").paused["note"] == "migration <window>"
    response = admin_user.post(reverse("delayq:schedule_action", args=["nightly-report", "resume"]))
    assert response.status_code == 302 and response["Location"] == reverse("delayq:schedules")
    assert nightly.schedule("nightly-report").state == "active"
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "topic", "result", "scope"))
    assert entries == [("schedule.pause", "reports", "ok", {"schedule": "nightly-report", "note": "migration <window>"}),
                       ("schedule.resume", "reports", "ok", {"schedule": "nightly-report"})]


def test_operator_runs_now_but_may_not_pause_or_delete(operator, nightly):
    """run needs publish_message (operator); pause and delete need manage_topics (admin): 403."""
    response = operator.post(reverse("delayq:schedule_action", args=["nightly-report", "run"]))
    assert response.status_code == 302
    assert [d.message.key[:len("schedule:nightly-report:now:")] for d in nightly.claim("reports", 10)] == \
        ["schedule:nightly-report:now:"]
    for action in ("pause", "delete"):
        assert operator.post(reverse("delayq:schedule_action", args=["nightly-report", action])).status_code == 403
    assert nightly.schedule("nightly-report").state == "active"
    assert list(AuditEntry.objects.values_list("action", flat=True)) == ["schedule.run"]


def test_viewer_may_act_on_nothing(viewer, nightly):
    for action in ("pause", "resume", "run", "delete"):
        assert viewer.post(reverse("delayq:schedule_action", args=["nightly-report", action])).status_code == 403
    assert not AuditEntry.objects.exists()


def test_admin_deletes_a_schedule(admin_user, nightly):
    response = admin_user.post(reverse("delayq:schedule_action", args=["nightly-report", "delete"]),
                               HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "No schedules." in response.content.decode()
    assert nightly.schedules() == []
    assert AuditEntry.objects.get().action == "schedule.delete"


def test_bad_requests_get_clear_4xx(admin_user, nightly):
    """An unknown action or schedule is a 404 that says so; a long note a 400; GET is refused."""
    response = admin_user.post(reverse("delayq:schedule_action", args=["nightly-report", "explode"]))
    assert response.status_code == 404 and "use one of pause, resume, delete, run" in response.content.decode()
    response = admin_user.post(reverse("delayq:schedule_action", args=["nope", "pause"]))
    assert response.status_code == 404 and "no schedule named" in response.content.decode()
    response = admin_user.post(reverse("delayq:schedule_action", args=["nightly-report", "pause"]), {"note": "x" * 501})
    assert response.status_code == 400 and "keep it to 500" in response.content.decode()
    assert admin_user.get(reverse("delayq:schedule_action", args=["nightly-report", "pause"])).status_code == 405
    assert nightly.schedule("nightly-report").state == "active" and not AuditEntry.objects.exists()


def test_login_and_csrf_are_required(admin_user, nightly):
    """Anonymous users go to the login page; a POST without the CSRF token is refused."""
    anonymous = Client()
    assert anonymous.get(reverse("delayq:schedules")).status_code == 302
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user.user)
    assert strict.post(reverse("delayq:schedule_action", args=["nightly-report", "pause"])).status_code == 403
    assert nightly.schedule("nightly-report").state == "active"


def test_the_json_api_lists_schedules_without_payloads(viewer, nightly):
    """api/schedules/: the page's rows as JSON, times in ISO 8601, no payload."""
    nightly.pause_schedule("nightly-report", note="window")
    response = viewer.get(reverse("delayq:api_schedules"))
    assert response.status_code == 200
    [row] = response.json()["schedules"]
    assert (row["name"], row["topic"], row["state"], row["words"]) == ("nightly-report", "reports", "paused",
                                                                       "Weekdays at 03:00 Europe/Berlin")
    assert row["paused"]["note"] == "window" and row["paused"]["at"].endswith("+00:00")
    assert "payload" not in row and "nightly" not in response.content.decode().replace("nightly-report", "")
    assert Client().get(reverse("delayq:api_schedules")).status_code == 401


def test_the_json_api_pages_schedules_by_name(viewer, operator, nightly):
    """api/schedules/?limit=&after=: pages walk every schedule once, by name, even when one is
    added after the cursor or deleted before it meanwhile; ?q= filters first; a token limited to a
    topic gets full pages of its own schedules; a bad limit or cursor is a 400 saying which."""
    from .test_api_tokens import _api, _token_for

    nightly.configure_topic("many")
    for i in range(7):
        nightly.upsert_schedule(f"m-{i}", topic="many", every=60)
    url = reverse("delayq:api_schedules")

    def walk(client_get, limit):
        names, after, pages = [], None, 0
        while True:
            answer = client_get({"limit": limit, **({"after": after} if after else {})})
            assert answer.status_code == 200, answer.content
            body = answer.json()
            assert len(body["schedules"]) <= limit
            names += [row["name"] for row in body["schedules"]]
            pages += 1
            if pages == 1:
                nightly.upsert_schedule("m-9", topic="many", every=60)    # after the cursor: listed
                nightly.delete_schedule("m-0")                            # before it: nothing shifts
            if body["next"] is None:
                return names, pages
            after = body["next"]
    names, pages = walk(lambda params: viewer.get(url, params), 3)
    assert names == ["m-0", "m-1", "m-2", "m-3", "m-4", "m-5", "m-6", "m-9", "nightly-report"] and pages == 3
    assert viewer.get(url).json()["next"] is None and len(viewer.get(url).json()["schedules"]) == 8   # m-0 went
    only = viewer.get(url, {"q": "nightly"}).json()
    assert [row["name"] for row in only["schedules"]] == ["nightly-report"] and only["next"] is None
    limited = _token_for(operator, "reports only", access="read", topics="reports")
    nightly.upsert_schedule("weekly-report", topic="reports", cron="0 4 * * 1")
    first = _api(limited, "GET", f"{url}?limit=1").json()
    assert [row["name"] for row in first["schedules"]] == ["nightly-report"] and first["next"] == "nightly-report"
    second = _api(limited, "GET", f"{url}?limit=1&after=nightly-report").json()
    assert [row["name"] for row in second["schedules"]] == ["weekly-report"] and second["next"] is None
    for bad, field in (({"limit": "0"}, "limit"), ({"limit": "201"}, "limit"), ({"limit": "x"}, "limit"),
                       ({"after": "no such/cursor"}, "after")):
        answer = viewer.get(url, bad)
        assert answer.status_code == 400 and answer.json()["error"].startswith(field), (bad, answer.content)


def test_an_alert_fires_when_a_schedule_misses_ticks(nightly):
    """The alert kind "schedule ticks missed in the last hour": ticks a scheduler found older than
    the catch-up window count; the alert ends when the hour has none."""
    from dashboard import alerts
    from dashboard.models import AlertRule, RetryPolicy, Topic

    topic = Topic.objects.create(name="reports", retry_policy=RetryPolicy.objects.create(name="p", jitter=0))
    rule = AlertRule.objects.create(topic=topic, kind=AlertRule.Kind.SCHEDULE_MISSED, threshold=2,
                                    email_to="ops@example.com")
    assert alerts.evaluate() == []
    nightly.upsert_schedule("poll", topic="reports", every=60, catchup_window=60)
    s = nightly.schedule("poll")
    pk = nightly.keys("reports", s.partition).p
    start = nightly.server_ms() // 60_000 * 60_000 - 10 * 60_000     # ten minutes without a scheduler
    nightly.redis.hset(pk.schedule_runs, "poll|next", start)
    nightly.redis.zadd(pk.schedule_due, {"poll": start})
    while nightly.tick_schedule("poll").outcome not in ("not_due",):
        pass
    missed = nightly.schedule("poll").missed
    assert missed >= 8
    [event] = alerts.evaluate()
    assert event.change == "firing" and event.value == missed
    assert alerts.summary(rule, event.change, event.value) == (
        f"[ALERT] reports/default: schedule ticks missed in the last hour {missed} (limit 2)")


def test_admin_pauses_and_resumes_every_schedule_the_filter_matches(admin_user, viewer, nightly):
    """The filter narrows the list; "pause all matching" pauses only those (one audit entry naming
    them), "resume all matching" resumes them; a viewer may not."""
    nightly.configure_topic("webhooks")
    nightly.upsert_schedule("poll-partner", topic="webhooks", every=30)
    nightly.upsert_schedule("poll-bank", topic="webhooks", every=60)
    page = admin_user.get(reverse("delayq:schedules"), {"q": "WEBHOOKS"}).content.decode()
    assert 'data-schedule="poll-partner"' in page and 'data-schedule="nightly-report"' not in page
    assert viewer.post(reverse("delayq:schedules_matching", args=["pause"]), {"q": "poll"}).status_code == 403
    response = admin_user.post(reverse("delayq:schedules_matching", args=["pause"]), {"q": "poll", "note": "partner down"})
    assert response.status_code == 302 and response["Location"] == "/schedules/?q=poll"
    states = {s.name: s.state for s in nightly.schedules()}
    assert states == {"nightly-report": "active", "poll-bank": "paused", "poll-partner": "paused"}
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.affected, entry.scope) == (
        "schedule.pause_matching", 2, {"filter": "poll", "note": "partner down", "schedules": ["poll-bank", "poll-partner"]})
    response = admin_user.post(reverse("delayq:schedules_matching", args=["resume"]), {"q": ""}, HTTP_HX_REQUEST="true")
    assert "2 schedules resumed." in response.content.decode()
    assert {s.state for s in nightly.schedules()} == {"active"}
    assert admin_user.post(reverse("delayq:schedules_matching", args=["delete"])).status_code == 404


def test_admin_edits_a_schedules_timing_audited_and_keeps_its_payload(admin_user, operator, nightly):
    """The edit form changes timing and rules only; the payload stays; the audit has before and
    after; a bad field is a 400 naming it and changes nothing; operators may not edit."""
    url = reverse("delayq:schedule_edit", args=["nightly-report"])
    assert operator.get(url).status_code == 403
    form = admin_user.get(url).content.decode()
    assert 'value="0 3 * * 1-5"' in form and 'value="Europe/Berlin"' in form
    good = {"timing": "cron", "cron": "30 4 * * *", "tz": "Europe/Berlin", "overlap": "allow", "catchup_window": "600",
            "jitter": "0", "max_runs": "0"}
    for field, value, words in (("cron", "30 4 * *", "expected 5 fields"), ("tz", "Mars/Base", "tz: unknown time zone"),
                                ("catchup_window", "soon", "catchup_window: 'soon' is not a number"),
                                ("timing", "", "timing: choose cron or every")):
        response = admin_user.post(url, {**good, field: value})
        assert response.status_code == 400 and words in html.unescape(response.content.decode()), field
    assert nightly.schedule("nightly-report").cron == "0 3 * * 1-5"
    response = admin_user.post(url, good)
    assert response.status_code == 302
    s = nightly.schedule("nightly-report")
    assert (s.cron, s.overlap, s.catchup_window, s.payload) == ("30 4 * * *", "allow", 600.0, b'{"kind":"nightly"}')
    entry = AuditEntry.objects.get()
    assert entry.action == "schedule.edit" and entry.scope["before"]["cron"] == "0 3 * * 1-5"
    assert entry.scope["after"]["cron"] == "30 4 * * *"
    response = admin_user.post(url, {**good, "timing": "every", "every": "30"})
    assert response.status_code == 302 and nightly.schedule("nightly-report").every == 30.0
    assert admin_user.get(reverse("delayq:schedule_edit", args=["nope"])).status_code == 404


def test_the_admin_topic_page_lists_its_schedules(admin_user, nightly):
    """Schedules in the Django admin: a topic's change page lists its schedules in words, with
    their state and next tick, and links to the Schedules page filtered to it."""
    from dashboard.models import RetryPolicy, Topic

    topic = Topic.objects.create(name="reports", retry_policy=RetryPolicy.objects.create(name="p", jitter=0))
    nightly.pause_schedule("nightly-report")
    page = admin_user.get(reverse("admin:delayq_topic_change", args=[topic.pk])).content.decode()
    assert "<li>nightly-report [paused]: Weekdays at 03:00 Europe/Berlin, next —</li>" in page
    assert 'href="/schedules/?q=reports"' in page


def test_the_page_shows_50_schedules_at_a_time(viewer, nightly):
    """Names are filtered and paged from the registry before any schedule is read: page 1 holds
    50 of 56 and links to page 2, which holds the rest; a bad page number is a 400."""
    nightly.configure_topic("many")
    for i in range(55):
        nightly.upsert_schedule(f"m-{i:02d}", topic="many", every=60)
    first = viewer.get(reverse("delayq:schedules")).content.decode()
    assert first.count('<article class="schedule"') == 50 and "56 schedules, 1-50 shown" in first
    assert 'href="?q=&amp;page=2"' in first
    second = viewer.get(reverse("delayq:schedules"), {"page": 2}).content.decode()
    assert second.count('<article class="schedule"') == 6 and 'data-schedule="nightly-report"' in second
    only = viewer.get(reverse("delayq:schedules"), {"q": "m-5"}).content.decode()
    assert only.count('<article class="schedule"') == 5 and "5 schedules matching" in only
    assert viewer.get(reverse("delayq:schedules"), {"page": "x"}).status_code == 400


def test_run_now_backfill_and_edit_refuse_bridge_topic_schedules(operator, admin_user, nightly):
    """Security review: a schedule on a Celery bridge topic fires signed tasks; an operator's run
    now or backfill published them at will (and an admin could retime it). Only pause and resume
    are allowed there."""
    nightly.configure_topic("celery.default")
    nightly.upsert_schedule("celery-beat:billing", topic="celery.default", every=60)
    name = "celery-beat:billing"
    card = _article(admin_user.get(reverse("delayq:schedules")).content.decode(), name)
    assert "Run now</button>" not in card and "Delete</button>" not in card and 'data-testid="backfill"' not in card
    assert "Pause</button>" in card and 'data-testid="bridge-note"' in card
    run = operator.post(reverse("delayq:schedule_action", args=[name, "run"]))
    assert run.status_code == 403 and "only the Celery bridge publishes" in html.unescape(run.content.decode())
    end_ms = nightly.server_ms() // 60_000 * 60_000 - 60_000
    from datetime import UTC, datetime
    span = {"from": datetime.fromtimestamp((end_ms - 120_000) / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S"),
            "to": datetime.fromtimestamp(end_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")}
    assert operator.get(reverse("delayq:schedule_backfill", args=[name]), span).status_code == 403
    assert operator.post(reverse("delayq:schedule_backfill", args=[name]), {"scope": "x"}).status_code == 403
    assert admin_user.get(reverse("delayq:schedule_edit", args=[name])).status_code == 403
    assert admin_user.post(reverse("delayq:schedule_edit", args=[name]), {"timing": "every", "every": "0.1"}
                           ).status_code == 403
    assert admin_user.post(reverse("delayq:schedule_action", args=[name, "delete"])).status_code == 403
    assert sum(nightly.counts("celery.default").values()) == 0 and nightly.schedule(name).every == 60.0
    assert admin_user.post(reverse("delayq:schedule_action", args=[name, "pause"])).status_code == 302
    assert nightly.schedule(name).state == "paused"


def test_edit_refuses_nan_and_infinite_numbers_400(admin_user, nightly):
    url = reverse("delayq:schedule_edit", args=["nightly-report"])
    base = {"timing": "every", "every": "60", "tz": "UTC", "overlap": "allow", "catchup_window": "600", "jitter": "0",
            "max_runs": "0"}
    for field in ("every", "catchup_window", "jitter"):
        for value in ("nan", "inf", "-inf"):
            response = admin_user.post(url, {**base, field: value})
            assert response.status_code == 400, (field, value)
    assert nightly.schedule("nightly-report").cron == "0 3 * * 1-5" and not AuditEntry.objects.exists()


def test_huge_interval_is_refused_and_list_survives_out_of_range_times(admin_user, viewer, nightly):
    """Security review: every=1e20 was accepted, and every page listing schedules then 500'd."""
    url = reverse("delayq:schedule_edit", args=["nightly-report"])
    response = admin_user.post(url, {"timing": "every", "every": "1e20", "tz": "UTC", "overlap": "allow",
                                     "catchup_window": "600", "jitter": "0", "max_runs": "0"})
    assert response.status_code == 400 and "ten years" in html.unescape(response.content.decode())
    # A time no datetime holds, as a schedule stored before the cap could have: the pages still answer.
    s = nightly.schedule("nightly-report")
    nightly.redis.hset(nightly.keys("reports", s.partition).p.schedule_runs, "nightly-report|next", 10 ** 18)
    assert viewer.get(reverse("delayq:schedules")).status_code == 200
    assert viewer.get(reverse("delayq:api_schedules")).status_code == 200


def test_run_now_refusals_are_said_and_audited(operator, nightly):
    """Security review: an engine refusal (here a payload over the topic's cap) was a 500 with no
    audit entry (a backfill's: test_schedule_backfill)."""
    nightly.configure_topic("small", max_payload_bytes=10)
    nightly.upsert_schedule("big", topic="small", every=60, payload="x" * 100)
    run = operator.post(reverse("delayq:schedule_action", args=["big", "run"]))
    assert run.status_code == 302
    entry = AuditEntry.objects.get(action="schedule.run")
    assert entry.result == "refused" and "bytes" in entry.detail
    assert sum(nightly.counts("small").values()) == 0


def test_finding_digits_that_are_not_ascii_are_a_400_not_a_500(operator, site_queue):
    """A review found '²'.isdigit() is true but int('²') fails: ?limit=² on api/schedules/ was a
    500; the Schedules page's ?page= and a token's expiry in days read numbers the same way."""
    from tests.dashboard.test_api_tokens import _create_form

    for text in ("²", "①", "٣"):
        api = operator.get(reverse("delayq:api_schedules"), {"limit": text})
        assert api.status_code == 400 and "limit" in api.json()["error"]
        assert operator.get(reverse("delayq:schedules"), {"page": text}).status_code == 400
        assert _create_form(operator, name="t", days=text).status_code == 400
