"""Which chromium the browser tests use when Debian's is missing."""

from tests.browser.conftest import playwright_chromium_installed


def test_playwrights_own_chromium_is_found_in_its_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path))
    assert not playwright_chromium_installed()
    (tmp_path / "chromium_headless_shell-1187").mkdir()
    assert playwright_chromium_installed()
