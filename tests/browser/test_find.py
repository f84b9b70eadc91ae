"""Finding messages in a real browser: the header's box leads to a message from any page, and a
state tab's query narrows the rows, says what went wrong when malformed, and ? shows its syntax."""

import pytest
from playwright.sync_api import expect

from tests.browser.test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_header_box_goes_to_a_message_from_any_page(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_group("refunds", "audit")
    mid = site_queue.publish("refunds", {"order": 1234}, key="order-1234", delay=600)
    site_queue.publish("orders", {"order": 1})
    log_in(page, base, user, password)
    page.goto(f"{base}/workers/")
    page.keyboard.press("/")                       # no search box of its own: / focuses the header's
    box = page.get_by_test_id("find-box")
    expect(box).to_be_focused()
    box.fill("order-1234")
    box.press("Enter")
    expect(page.get_by_test_id("find-found")).to_contain_text(mid)   # two groups hold it: both listed
    expect(page.get_by_test_id("find-found").locator("tbody tr")).to_have_count(2)
    page.get_by_test_id("find-found").locator("tbody tr", has_text="audit").get_by_role("link", name=mid).click()
    expect(page).to_have_url(f"{base}/topics/refunds/audit/messages/{mid}/")
    page.get_by_test_id("find-box").fill(mid.lower()[:22])
    page.get_by_test_id("find-box").press("Enter")
    expect(page.get_by_test_id("find-found")).to_contain_text("pending")


def test_a_tab_query_narrows_rows_and_explains_mistakes(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    ids = site_queue.publish_many("orders", [{"customer": {"id": i % 4}} for i in range(12)])
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/ready/")
    expect(page.locator("#messages tbody tr")).to_have_count(12)
    query = page.get_by_test_id("tab-query")
    query.fill("payload.customer.id:3")
    query.press("Enter")
    expect(page.get_by_test_id("scan-progress")).to_contain_text("Scanned 12 of 12 ready messages, 3 matches")
    expect(page.locator("#messages tbody tr")).to_have_count(3)
    for mid in ids[3::4]:
        expect(page.locator(f"#msg-{mid}")).to_be_visible()
    assert "q=payload.customer.id%3A3" in page.url              # bookmarkable
    page.get_by_test_id("tab-query").fill('payload.note:"open')
    page.get_by_test_id("tab-query").press("Enter")
    expect(page.get_by_test_id("query-error")).to_contain_text("unclosed quote")
    expect(page.get_by_test_id("tab-query")).to_have_value('payload.note:"open')
    page.locator("h1").click()                      # out of the box: ? is a shortcut again
    page.keyboard.press("?")
    expect(page.get_by_test_id("help-query-syntax")).to_contain_text("attempts>=3")
