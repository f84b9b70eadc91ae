"""Keyboards, screen readers and phones in a real browser: axe-core finds no serious or critical
violation on any page (light and dark), no page is wider than a 390 px phone, the navigation and
every state tab stay reachable there, and the keyboard shortcuts of keys.js work."""

import re

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture
from tests.dashboard.test_limits import held_back_by_key
from tests.dashboard.test_pages import kill

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

PHONE = {"width": 390, "height": 844}
BLOCKING = {"serious", "critical"}
RING = "(s => s.outlineStyle + ' ' + s.outlineWidth)(getComputedStyle(document.activeElement))"   # delayq.css's
# The deepest elements sticking out past the viewport's right edge, to name the culprit in a failure.
WIDEST = """[...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > innerWidth + 1 && ![...e.children].some(c => c.getBoundingClientRect().right > innerWidth + 1))
  .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '') + ' ' + Math.round(e.getBoundingClientRect().right))"""


@pytest.fixture
def console(page, operator_login, site_queue):  # noqa: F811
    """A logged-in operator on a site with dead letters (so a topic tab, its error groups and a
    message page have rows), a pending message and a live worker; returns (base, {page: path})."""
    base, user, password = operator_login
    ids = kill(site_queue, "orders", [f'{{"order": {i}}}' for i in range(3)])
    site_queue.publish("orders", "later", delay=600)
    site_queue.heartbeat(["orders"], "web-1", details={"host": "box-1", "pid": 4242, "concurrency": 4})
    held, _ = held_back_by_key(site_queue)       # dispatch limits: what they hold back, fairness keys
    site_queue.upsert_schedule("nightly-report", topic="orders", cron="0 3 * * 1-5", tz="Europe/Berlin")
    site_queue.run_schedule_now("nightly-report")
    log_in(page, base, user, password)
    paths = {
        "overview": "/", "topic dead tab": "/topics/orders/default/dead/",
        "message": f"/topics/orders/messages/{ids[0]}/", "operations": "/operations/", "audit": "/audit/",
        "tokens": "/tokens/", "workers": "/workers/", "analytics": "/analytics/", "schedules": "/schedules/",
        "topic with limits": "/topics/emails/default/ready/", "held-back message": f"/topics/emails/messages/{held[1]}/",
        "forecast": "/topics/orders/default/forecast/", "spread preview": "/topics/orders/default/spread/",
        "replay preview with its canary": "/topics/orders/default/replay-all/",
    }
    return base, paths


def axe_blocking(page) -> list[str]:
    results = Axe().run(page)
    return [f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
            for v in results.response["violations"] if v["impact"] in BLOCKING]


def visit(page, url):
    page.goto(url)
    expect(page.locator("h1").first).to_be_visible()


def test_finding_axe_serious_or_critical_violations_on_any_page(page, console):
    base, paths = console
    found = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for name, path in paths.items():
            visit(page, base + path)
            if problems := axe_blocking(page):
                found[f"{name} ({scheme})"] = problems
    page.context.clear_cookies()
    visit(page, f"{base}/login/")
    if problems := axe_blocking(page):
        found["login"] = problems
    assert found == {}


def test_finding_pages_wider_than_a_390px_phone(page, console, tmp_path):
    base, paths = console
    page.set_viewport_size(PHONE)
    too_wide = {}

    def check(name, path):
        visit(page, base + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        page.screenshot(path=str(tmp_path / f"{re.sub(r'\\W+', '-', name)}-390.png"), full_page=True)
        if width > PHONE["width"]:
            too_wide[name] = (width, page.evaluate(WIDEST))

    for name, path in paths.items():
        check(name, path)
    page.context.clear_cookies()
    check("login", "/login/")
    assert too_wide == {}
    assert list(tmp_path.glob("*-390.png"))


def assert_inside_the_phone(locator):
    for item in locator.all():
        item.scroll_into_view_if_needed()
        box = item.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], item.inner_text()


def open_menu(page):
    """The phone's Menu button, opened: the main navigation's links show."""
    toggle = page.get_by_role("button", name="Menu")
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    return page.get_by_role("navigation", name="main").get_by_role("link")


def test_finding_dead_tab_off_screen_on_a_phone(page, console):
    base, paths = console
    page.set_viewport_size(PHONE)
    visit(page, base + paths["topic dead tab"])
    assert_inside_the_phone(page.locator("nav.tabs a"))
    assert_inside_the_phone(open_menu(page))


def test_finding_navigation_wraps_on_a_phone_it_folds_into_a_menu(page, console, tmp_path):
    """At 390 px the main navigation wrapped over three lines of the top bar. It folds behind a
    Menu button (aria-expanded), which the keyboard opens and closes (Esc gives focus back), and
    every link is reached from it; at 1440 px there is no button and the links show."""
    base, paths = console
    page.set_viewport_size(PHONE)
    visit(page, base + "/")
    toggle = page.get_by_role("button", name="Menu")
    links = page.locator("nav#main-nav a")         # (a role query would skip the hidden ones)
    expect(toggle).to_be_visible()
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(links.first).to_be_hidden()
    assert page.locator("header.topbar").bounding_box()["height"] < 100     # two lines at most, not five
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    assert {"/", "/workers/", "/schedules/", "/operations/", "/analytics/", "/audit/", "/tokens/"} <= set(hrefs)

    toggle.focus()
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    for i in range(len(hrefs)):                 # Tab walks the links, each inside the phone
        expect(links.nth(i)).to_be_focused()
        box = links.nth(i).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], hrefs[i]
        if i < len(hrefs) - 1:
            page.keyboard.press("Tab")
    page.screenshot(path=str(tmp_path / "menu-open-390.png"))
    assert axe_blocking(page) == []
    page.keyboard.press("Escape")
    expect(toggle).to_have_attribute("aria-expanded", "false")
    expect(toggle).to_be_focused()
    expect(links.first).to_be_hidden()

    for href in hrefs:                          # every link, reached through the menu
        visit(page, base + "/")
        open_menu(page).and_(page.locator(f'[href="{href}"]')).click()
        expect(page).to_have_url(base + href)

    page.set_viewport_size({"width": 1440, "height": 900})
    visit(page, base + "/")
    expect(toggle).to_be_hidden()
    expect(links.first).to_be_visible()


def test_finding_no_skip_link_and_no_visible_focus(page, console):
    base, paths = console
    visit(page, base + "/")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    assert skip.bounding_box()["y"] >= 0      # off-screen until focused, then in view
    assert page.evaluate(RING) == "solid 3px"
    page.keyboard.press("Enter")
    expect(page.locator("main#content")).to_be_focused()
    page.keyboard.press("Tab")        # the next stop is inside the page's content, past the navigation
    assert page.evaluate("document.activeElement.closest('main') !== null")

    # A row action is reached by Tab alone, with the same ring.
    visit(page, base + paths["topic dead tab"])
    for _ in range(120):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.closest('tr[data-id]') !== null"
                         " && document.activeElement.textContent.trim() === 'Replay'"):
            break
    else:
        pytest.fail("no row's Replay button within 120 Tab presses")
    assert page.evaluate(RING) == "solid 3px"


def test_finding_no_keyboard_shortcuts(page, console, site_queue):
    base, paths = console
    visit(page, base + paths["topic dead tab"])
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("g w")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    rows = page.locator("#messages tbody tr[data-id]")
    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_attribute("aria-current", "true")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_attribute("aria-current", "true")
    expect(rows.nth(0)).not_to_have_attribute("aria-current", "true")
    page.keyboard.press("k")
    expect(rows.nth(0)).to_have_attribute("aria-current", "true")
    page.keyboard.press("x")
    expect(rows.nth(0).locator("input[name=ids]")).to_be_checked()

    # r refreshes the message list in place: a row killed meanwhile shows up without a reload.
    page.evaluate("window.notReloaded = true")
    kill(site_queue, "orders", ['{"order": 99}'])
    page.keyboard.press("r")
    expect(rows).to_have_count(4)
    assert page.evaluate("window.notReloaded === true")

    page.keyboard.press("/")
    search = page.locator("#messages input[type=search]")
    expect(search).to_be_focused()
    page.keyboard.type("g w")       # typed into the box, not taken as shortcuts
    expect(search).to_have_value("g w")
    expect(page).to_have_url(re.compile(r"/dead/$"))
    page.keyboard.press("Escape")     # leaves the box, so keys are shortcuts again
    page.keyboard.press("g")
    page.keyboard.press("w")
    expect(page.locator("h1")).to_have_text("Workers")
    page.keyboard.press("g")
    page.keyboard.press("a")
    expect(page.locator("h1")).to_have_text(re.compile("Audit"))
    page.keyboard.press("g")
    page.keyboard.press("o")
    expect(page.locator("h1")).to_have_text("Topics")
    page.keyboard.press("/")
    expect(page.get_by_test_id("topic-search")).to_be_focused()
