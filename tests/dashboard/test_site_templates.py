"""The standalone site's own templates (the top-level templates/ folder): its error pages in
delayq's look with DEBUG off, and its override of the app's brand."""

from pathlib import Path

import pytest
from django.test import Client, RequestFactory
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[2]


def looks_like_delayq(html: str) -> bool:
    return ("/static/delayq/delayq.css" in html and '<header class="topbar">' in html
            and 'class="brand"' in html and 'data-testid="error-page"' in html)


def test_finding_site_error_pages_are_django_plain_ones(settings):
    """Every page Django renders for an error is the site's own template, not Django's built-in text."""
    assert settings.DEBUG is False
    assert Path(settings.TEMPLATES[0]["DIRS"][0]) == ROOT / "templates"
    for name in ("400.html", "403.html", "404.html", "500.html", "403_csrf.html"):
        assert (ROOT / "templates" / name).is_file(), name


@pytest.mark.django_db
def test_a_missing_page_is_the_sites_404(viewer, site_queue):
    anonymous = Client().get("/no/such/page/")
    html = anonymous.content.decode()
    assert anonymous.status_code == 404 and looks_like_delayq(html) and "There is no page at /no/such/page/</p>" in html
    missing = viewer.get(reverse("delayq:topic", args=["nope"]))
    html = missing.content.decode()
    assert missing.status_code == 404 and looks_like_delayq(html) and "No such topic</p>" in html


@pytest.mark.django_db
def test_a_missing_permission_is_the_sites_403_and_says_which(viewer, site_queue):
    site_queue.configure_topic("orders")
    refused = viewer.post(reverse("delayq:publish", args=["orders"]), {"payload": "1"})
    html = refused.content.decode()
    assert refused.status_code == 403 and looks_like_delayq(html)
    assert "You need the &#x27;publish_message&#x27; permission for this." in html


@pytest.mark.django_db
def test_a_failed_csrf_check_is_the_sites_page_and_says_what_to_do(viewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer.user)
    refused = client.post(reverse("delayq:logout"))
    html = refused.content.decode()
    assert refused.status_code == 403 and looks_like_delayq(html)
    assert "This form could not be checked" in html and "Nothing was changed." in html


def test_a_bad_host_is_the_sites_400():
    refused = Client().get("/", headers={"Host": "evil.example"})
    assert refused.status_code == 400 and looks_like_delayq(refused.content.decode())


def test_the_500_page_renders_without_a_request_context_or_database():
    """No database here (pytest-django refuses any query in a test without the db mark), and
    Django renders 500.html with no context at all."""
    from django.views.defaults import server_error

    answer = server_error(RequestFactory().get("/"))
    html = answer.content.decode()
    assert answer.status_code == 500 and looks_like_delayq(html) and "Something went wrong on the server" in html


@pytest.mark.django_db
def test_the_site_overrides_the_apps_brand_and_a_project_can_too(viewer, settings):
    page = viewer.get(reverse("delayq:audit"))
    assert 'title="delayq on testserver">delayq</a>' in page.content.decode()
    assert any(t.origin.name == str(ROOT / "templates" / "delayq" / "_brand.html") for t in page.templates)
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": []}]     # a host project without an override
    default = viewer.get(reverse("delayq:audit")).content.decode()
    assert '<a class="brand" href="/">delayq</a>' in default
