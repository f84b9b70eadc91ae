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


def playwright_chromium_installed() -> bool:
    """Whether `playwright install chromium` has put Playwright's own build in its cache."""
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    return any(cache.glob("chromium*"))


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Debian's chromium when present (./scripts/test installs it when run as root), else
    Playwright's own build (./scripts/test downloads it otherwise)."""
    if Path(CHROMIUM).exists():
        executable = {"executable_path": CHROMIUM}
    elif playwright_chromium_installed():
        executable = {}
    else:
        raise RuntimeError("the browser tests need chromium: apt-get install chromium (Debian), or "
                           ".venv/bin/python -m playwright install chromium; ./scripts/test does one of them itself")
    return {**browser_type_launch_args, **executable, "headless": True,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                     "--disable-component-update", "--no-first-run", "--disable-sync"]}


@pytest.fixture
def artifacts():
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
