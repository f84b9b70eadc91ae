"""Controls where the operator is: the opening tab, counts and order of the tabs, the pause switch
in the header, action results as toasts, reschedule presets, attempts in words, one time format."""

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.core.cache import cache
from django.urls import reverse

import dashboard
from dashboard.models import AuditEntry
from queue_core import MessageState
from queue_core import RetryPolicy as EnginePolicy

from .test_pages import kill

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def row_ids(html: str) -> list[str]:
    return re.findall(r'<tr id="msg-[^"]+" data-id="([^"]+)"', html)


def retry_later(q, topic, payloads):
    """Messages that failed once and wait for their next attempt."""
    q.configure_topic(topic, retry=EnginePolicy.fixed(300, max_attempts=5))
    ids = q.publish_many(topic, payloads)
    for d in q.claim(topic, len(payloads)):
        q.nack(d, "later")
    return ids


def test_finding_topic_opens_on_ready_instead_of_its_first_problem_tab(viewer, site_queue):
    def opened(*args):
        cache.clear()   # the counts a tab is chosen by are cached for a second
        response = viewer.get(reverse("delayq:topic", args=args))
        assert response.status_code == 200
        return response.context["state"]

    site_queue.publish("later", "x", delay=600)
    assert opened("later") == "pending"                       # nothing else: the pending tab
    site_queue.publish("later", "now")
    assert opened("later") == "ready"                         # ready before pending
    retry_later(site_queue, "flaky", ["a"])
    site_queue.publish("flaky", "b")
    assert opened("flaky") == "retrying"                      # a problem before ready
    kill(site_queue, "broken", ["a"])
    retry_later(site_queue, "broken", ["b"])
    assert opened("broken") == "dead"                         # dead first of all
    # A group's own page (topics/<topic>/<group>/) opens on that group's first problem tab.
    site_queue.configure_group("broken", "audit")
    site_queue.publish("broken", "c")
    assert opened("broken", "audit") == "ready"
    assert opened("broken", "default") == "dead"
    assert viewer.get(reverse("delayq:topic", args=["broken", "nosuch"])).status_code == 404


def test_an_empty_topic_opens_on_ready(viewer, site_queue):
    site_queue.configure_topic("quiet")
    assert viewer.get(reverse("delayq:topic", args=["quiet"])).context["state"] == "ready"


def test_every_state_tab_shows_its_count(viewer, site_queue):
    kill(site_queue, "orders", ["a", "b"])
    site_queue.publish_many("orders", ["c", "d", "e"])
    site_queue.publish("orders", "f", delay=600)
    for htmx in (False, True):
        html = viewer.get(reverse("delayq:topic_state", args=["orders", "pending"]),
                          headers=HTMX if htmx else {}).content.decode()
        tabs = re.search(r'<nav class="tabs".*?</nav>', html, re.S).group(0)
        counts = dict(re.findall(r'data-state="(\w+)"[^>]*>\w+ <span class="count" data-testid="tab-count">(\d+)<',
                                 tabs))
        assert counts == {"pending": "1", "ready": "3", "unacked": "0", "retrying": "0", "dead": "2"}


def test_finding_dead_tab_is_oldest_first(viewer, site_queue):
    # A topic of its own: the site caches a topic's layout for 2 s, and earlier tests' "orders" had one partition.
    site_queue.configure_topic("deaths", partitions=3, retry=EnginePolicy.fixed(0, max_attempts=1))
    died = []
    for i in range(60):   # one at a time, so each dies later than the one before
        died.append(site_queue.publish("deaths", str(i)))
        site_queue.nack(site_queue.claim("deaths", 1)[0], "boom")
    newest_first = [m.id for m in sorted(site_queue.peek("deaths", "dead", limit=100),
                                         key=lambda m: (m.dead_at, m.id), reverse=True)]
    url = reverse("delayq:topic_state", args=["deaths", "dead"])
    page = viewer.get(url)
    html = page.content.decode()
    assert row_ids(html) == newest_first[:50]                 # newest first by default
    toggle = re.search(r'data-testid="sort-toggle">(.*?)</span>', html, re.S).group(1)
    assert 'href="/topics/deaths/default/dead/?sort=oldest"' in toggle
    assert re.search(r'data-sort="newest" class="chosen" aria-current="true"', toggle)
    # The next page continues newest first, and so do its own links.
    rest = viewer.get(url, {"after": page.context["next_cursor"]}).content.decode()
    assert row_ids(rest) == newest_first[50:]
    oldest = viewer.get(url, {"sort": "oldest"})
    oldest_html = oldest.content.decode()
    assert row_ids(oldest_html) == newest_first[::-1][:50]
    # The sort travels in the pagination links, the filter form and the URL the toggle pushes.
    pager = re.search(r'<p class="pager"><a href="([^"]+)" hx-get="([^"]+)"', oldest_html)
    assert "sort=oldest" in pager.group(1) and "sort=oldest" in pager.group(2)
    assert '<input type="hidden" name="sort" value="oldest">' in oldest_html
    following = viewer.get(url + pager.group(1).replace("&amp;", "&"))
    assert row_ids(following.content.decode()) == newest_first[::-1][50:]
    assert [r["m"].id for r in viewer.get(url, {"sort": "newest"}, headers=HTMX).context["rows"]] == newest_first[:50]


def test_other_tabs_keep_due_order_and_can_be_reversed(viewer, site_queue):
    ids = site_queue.publish_many("orders", [str(i) for i in range(5)])
    url = reverse("delayq:topic_state", args=["orders", "ready"])
    assert row_ids(viewer.get(url).content.decode()) == ids
    assert row_ids(viewer.get(url, {"sort": "newest"}).content.decode()) == ids[::-1]


def test_newest_first_with_a_time_range_starts_at_its_end(viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = [site_queue.publish("orders", str(i), delay=i * 60) for i in range(5)]   # due 0, 1, ... 4 min from now
    url = reverse("delayq:topic_state", args=["orders", "pending"])
    due = {m.id: m.due_at for m in site_queue.peek("orders", "pending", limit=10)}
    lo, hi = due[ids[1]], due[ids[3]]
    window = {"from": lo.astimezone(UTC).replace(tzinfo=None).isoformat(),
              "to": hi.astimezone(UTC).replace(tzinfo=None).isoformat()}
    newest = viewer.get(url, {**window, "sort": "newest"}).context["rows"]
    oldest = viewer.get(url, window).context["rows"]
    assert [r["m"].id for r in oldest] == ids[1:4] and [r["m"].id for r in newest] == ids[1:4][::-1]


def test_an_unknown_sort_is_a_400_that_names_the_choices(viewer, site_queue):
    site_queue.publish("orders", "x")
    response = viewer.get(reverse("delayq:topic_state", args=["orders", "dead"]), {"sort": "sideways"})
    assert response.status_code == 400 and "use sort=newest or sort=oldest" in response.content.decode()


def test_finding_reschedule_has_no_presets_and_no_zone(operator, site_queue):
    mid = site_queue.publish("orders", "x", delay=600)
    for url in (reverse("delayq:topic_state", args=["orders", "pending"]),
                reverse("delayq:message", args=["orders", mid])):
        html = operator.get(url).content.decode()
        presets = re.findall(r'<button type="button" data-preset-seconds="(\d+)">([^<]+)</button>', html)
        assert ("300", "+5 min") in presets and ("3600", "+1 h") in presets and ("86400", "+1 d") in presets
        assert re.search(r'name="reschedule_at" step="1"[^>]*> <abbr title="Coordinated Universal Time">UTC</abbr>',
                         html)


def test_finding_pause_hides_in_a_collapsed_panel(admin_user, viewer, site_queue):
    site_queue.publish("orders", "x")
    url = reverse("delayq:topic", args=["orders"])
    html = admin_user.get(url).content.decode()
    header = re.search(r'<div class="page-head">(.*?)<details', html, re.S).group(1)
    assert 'data-testid="pause-toggle">Pause group default</button>' in header     # in the header, not the panel
    assert 'hx-post="/topics/orders/default/pause/"' in header and "csrfmiddlewaretoken" in header
    assert "pause-toggle" not in re.search(r"<details class=\"config\">.*?</details>", html, re.S).group(0)
    assert "pause-toggle" not in viewer.get(url).content.decode()                   # a viewer sees the state only
    # htmx: the header's state and switch come back in place, the result as a toast, counts refresh.
    pause = reverse("delayq:topic_pause", args=["orders", "default"])
    response = admin_user.post(pause, {"paused": "1"}, headers=HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and fragment.lstrip().startswith('<div id="group-state"')
    assert '>paused</span>' in fragment and 'name="paused" value="0"' in fragment and "Resume group default" in fragment
    assert '<div id="delayq-messages" hx-swap-oob="true">' in fragment and "Group default of orders paused" in fragment
    assert response["HX-Trigger"] == "counts-changed" and site_queue.group_config("orders").paused
    # Without htmx: the form posts and returns to the group's page.
    plain = admin_user.post(pause, {"paused": "0"})
    assert plain.status_code == 302 and plain["Location"] == "/topics/orders/default/"
    assert not site_queue.group_config("orders").paused
    assert '>active</span>' in admin_user.get(plain["Location"]).content.decode()


def test_finding_row_action_answers_off_screen(operator, site_queue):
    """Every action's result lands in the toast container: a live region pinned to the viewport."""
    mid = site_queue.publish("orders", "x", delay=600)
    page = operator.get(reverse("delayq:topic_state", args=["orders", "pending"])).content.decode()
    assert re.search(r'<div class="toasts" role="status" aria-live="polite" data-testid="toasts">\s*<div id="delayq-messages">',
                     page)
    css = Path(finders.find("delayq/delayq.css")).read_text()
    assert re.search(r"\.toasts \{ position: fixed;", css)
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(tzinfo=None, microsecond=0).isoformat()
    url = reverse("delayq:message_action", args=["orders", "pending"])
    for data in ({"action": "reschedule", "one": mid, "reschedule_at": at},     # a row's button
                 {"action": "reschedule", "ids": [mid], "reschedule_at": at},   # the bulk button
                 {"action": "reschedule", "ids": [mid]}):                       # refused: no time given
        fragment = operator.post(url, data, headers=HTMX).content.decode()
        toast = re.search(r'<div id="delayq-messages" hx-swap-oob="true">(.*?)</div>', fragment, re.S).group(1)
        assert "Rescheduled 1 message" in toast or "Give the new due time (UTC)" in toast
    assert site_queue.get("orders", mid).state is MessageState.pending


def test_finding_attempt_0_of_4_for_a_message_never_tried(viewer, site_queue):
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(30, max_attempts=4))
    fresh = site_queue.publish("orders", "x")
    html = viewer.get(reverse("delayq:message", args=["orders", fresh])).content.decode()
    assert "attempt 0 of 4" not in html
    assert re.search(r'data-testid="attempts">not tried yet, up to 4 attempts<', html)
    site_queue.nack(site_queue.claim("orders")[0], "boom")
    html = viewer.get(reverse("delayq:message", args=["orders", fresh])).content.decode()
    assert "tried 1 time, up to 4 attempts" in html and "(attempt 1 of 4)" not in html
    rows = viewer.get(reverse("delayq:topic_state", args=["orders", "retrying"])).content.decode()
    assert 'title="tried 1 time, up to 4 attempts">1' in rows


def test_finding_times_shown_in_several_formats(admin_user, site_queue, settings):
    """Every page writes times one way, in UTC with the zone named, inside <time datetime>, even
    when the site's TIME_ZONE is not UTC (|date wrote local time under a 'UTC' label)."""
    settings.TIME_ZONE = "Asia/Tokyo"
    kill(site_queue, "orders", ["a"])
    admin_user.post(reverse("delayq:topic_pause", args=["orders"]), {"paused": "1"})
    entry = AuditEntry.objects.latest("at")
    stamp = entry.at.astimezone(UTC)
    expected = (f'<time datetime="{stamp:%Y-%m-%dT%H:%M:%S}.{stamp.microsecond // 1000:03d}Z">'
                f'{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond // 1000:03d} UTC</time>')
    assert expected in admin_user.get(reverse("delayq:audit")).content.decode()
    dead = admin_user.get(reverse("delayq:topic_state", args=["orders", "dead"])).content.decode()
    when = re.findall(r'<td class="when"><time datetime="[0-9T:.-]+Z">[0-9: .-]+ UTC</time>', dead)
    assert len(when) == 3    # the row's time of death, the error group's first and last seen
    templates = Path(dashboard.__file__).parent / "templates" / "delayq"
    # |date stays only after |utc, in attributes (a <time> cannot go there).
    assert not [page.name for page in templates.glob("*.html") if re.search(r"(?<!\|utc)\|date:", page.read_text())]


def test_the_local_time_toggle_and_its_script_are_on_every_page(viewer, site_queue):
    html = viewer.get(reverse("delayq:overview")).content.decode()
    assert 'id="local-time-toggle" aria-pressed="false"' in html and "/static/delayq/delayq.js" in html
    script = Path(finders.find("delayq/delayq.js")).read_text()
    assert 'querySelectorAll("time[datetime]")' in script and "localStorage" in script
