"""Controls where the operator is, in a real browser: a row rescheduled with a preset answers in a
toast inside the viewport (no scrolling to the top), and the local-time toggle rewrites times."""

import re
import time
from datetime import UTC, timedelta

import pytest
from playwright.sync_api import expect

from queue_core import MessageState
from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def browser_context_args(browser_context_args):
    # Far from UTC, so local time reads differently from the server's UTC.
    return {**browser_context_args, "timezone_id": "Asia/Tokyo", "viewport": {"width": 1440, "height": 900}}


def test_finding_row_reschedule_does_nothing_until_you_scroll(page, operator_login, site_queue, artifacts):  # noqa: F811
    base, user, password = operator_login
    ids = site_queue.publish_many("later", [f'{{"n": {i}}}' for i in range(40)], delay=600)
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/later/")                 # opens on pending: the only tab with messages
    expect(page.locator("nav.tabs a.current")).to_have_text(re.compile(r"^pending\s+40$"))
    page.get_by_test_id("reschedule-presets").first.get_by_role("button", name="+1 h").click()
    field = page.get_by_test_id("reschedule-at")
    expect(field).to_have_value(re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$"))
    row = page.locator(f"#msg-{ids[-1]}")
    row.scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 300      # far from the top of the page
    before = time.time()
    row.get_by_role("button", name="Reschedule").click()
    toast = page.get_by_test_id("toasts").locator("li")
    expect(toast).to_contain_text("Rescheduled 1 message of group default.")
    box = toast.bounding_box()
    viewport = page.viewport_size
    assert box and box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"]
    assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"]
    page.screenshot(path=str(artifacts / "toast-after-row-reschedule.png"))
    moved = site_queue.get("later", ids[-1])
    assert moved.state is MessageState.pending
    assert before + 3600 - 120 < moved.due_at.timestamp() < time.time() + 3600 + 5   # +1 h, UTC like the field
    toast.get_by_role("button", name="Dismiss this message").click()
    expect(toast).to_have_count(0)


def test_finding_one_time_format_with_a_local_time_toggle(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    [mid] = site_queue.publish_many("later", ["x"], delay=600)
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/later/messages/{mid}/")
    due = page.locator("tr", has_text="Due").locator("time")
    utc_text = due.inner_text()
    assert utc_text.endswith(" UTC")
    toggle = page.get_by_test_id("local-time-toggle")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(due).to_have_text(re.compile(r" Asia/Tokyo$"))
    utc_hour, local_hour = int(utc_text[11:13]), int(due.inner_text()[11:13])
    assert (local_hour - utc_hour) % 24 == 9
    page.reload()                                       # remembered
    expect(page.locator("tr", has_text="Due").locator("time")).to_have_text(re.compile(r" Asia/Tokyo$"))
    page.get_by_test_id("local-time-toggle").click()
    expect(page.locator("tr", has_text="Due").locator("time")).to_have_text(utc_text)


def overlaps(a, b) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


@pytest.mark.parametrize("viewport", [{"width": 1440, "height": 900}, {"width": 390, "height": 844}],
                         ids=["1440x900", "390x844"])
def test_finding_toasts_cover_the_bottom_corner_controls(page, operator_login, site_queue, viewport):  # noqa: F811
    """The toast is pinned to the window's bottom corner, where the row just used and the pager can
    sit. A toast that appears over the control just used scrolls it clear, the page reserves the
    toast's height at its end (the last rows and the pager scroll above it), and it is dismissible
    in a polite live region."""
    base, user, password = operator_login
    page.set_viewport_size(viewport)
    ids = [site_queue.publish("later", f'{{"n": {i}}}', delay=1000 + 120 * i) for i in range(60)]   # a pager
    log_in(page, base, user, password)
    page.get_by_test_id("live-interval").select_option("0")     # a still page
    page.goto(f"{base}/topics/later/")
    expect(page.locator("#messages tr[data-id]")).to_have_count(50)
    # Row 30 rescheduled 2 s later: it keeps its place in the list (its neighbours are 2 min away).
    due = site_queue.get("later", ids[30]).due_at + timedelta(seconds=2)
    page.get_by_test_id("reschedule-at").fill(due.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    button = page.locator(f"#msg-{ids[30]}").get_by_role("button", name="Reschedule")
    # the row's actions on the window's bottom edge, where the toast appears
    button.evaluate("b => b.scrollIntoView({block: 'end', inline: 'end'})")
    assert button.bounding_box()["y"] + button.bounding_box()["height"] > viewport["height"] - 20
    button.click()
    toasts = page.get_by_test_id("toasts")
    toast = toasts.locator("li")
    expect(toast).to_contain_text("Rescheduled 1 message of group default.")
    expect(toasts).to_have_attribute("aria-live", "polite")
    expect(toast).to_have_attribute("data-placed", "1")           # delayq.js has placed it (and scrolled)
    assert site_queue.get("later", ids[30]).due_at > due - timedelta(seconds=1)
    box, used = toast.bounding_box(), button.bounding_box()
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"]
    # still in sight (to the pixel: scrolled to the window's edge, a row can end a fraction of a
    # pixel past it once the page above it has fractional heights)
    assert used["y"] >= 0 and used["y"] + used["height"] <= viewport["height"] + 1
    assert not overlaps(box, used), (box, used)                                   # and not under the toast

    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")   # the page's end
    pager = page.locator("#messages .pager")
    expect(pager).to_be_visible()
    last = page.locator("#messages tr[data-id]").last.get_by_role("button", name="Reschedule")
    last.evaluate("b => b.scrollIntoView({block: 'nearest', inline: 'end'})")
    for control in (pager, last):
        assert not overlaps(toast.bounding_box(), control.bounding_box()), control
    toast.get_by_role("button", name="Dismiss this message").click()
    expect(toast).to_have_count(0)
    assert page.evaluate("document.body.style.paddingBottom") == ""   # the room goes with the toast
