"""Browser tests: Debian's chromium driven by Playwright against pytest-django's live_server."""

import os
import shutil
from pathlib import Path

import pytest

from tests.dashboard.conftest import site_queue  # noqa: F401 - shared fixture

# Playwright's sync API runs an event loop in this thread; Django refuses ORM calls from a thread
# with a running loop unless told this is intended (it is: the test thread only drives the browser).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        raise RuntimeError("Debian's chromium is required for browser tests: apt-get install chromium")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "headless": True,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                     "--disable-component-update", "--no-first-run", "--disable-sync"]}


@pytest.fixture
def artifacts():
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
