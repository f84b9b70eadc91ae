"""The site refuses an insecure production configuration, with a message that says what to do."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_settings(**env):
    clean = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    return subprocess.run([sys.executable, "-c", "import config.settings"], cwd=ROOT, capture_output=True,
                          text=True, env={**clean, **env}, timeout=60)


def test_debug_off_with_default_secret_refuses_to_start():
    result = load_settings(DEBUG="0")
    assert result.returncode != 0
    assert "set SECRET_KEY in the environment" in result.stderr


def test_debug_off_with_a_real_secret_starts():
    assert load_settings(DEBUG="0", SECRET_KEY="x" * 50).returncode == 0


def test_malformed_boolean_is_named():
    result = load_settings(DEBUG="maybe")
    assert result.returncode != 0 and "DEBUG='maybe' is not a boolean" in result.stderr
