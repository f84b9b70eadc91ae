# Sourced by scripts/run and scripts/test: find Python >= 3.12, create .venv, install the project.
# Why a stamp file: reinstalling on every run costs ~20 s; we reinstall only when pyproject.toml changes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

python_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }

find_python() {
  local cand
  # PATH first; pyenv shims for versions that are not selected fail here and are skipped.
  for cand in python3.13 python3.12 python3; do
    if command -v "$cand" >/dev/null 2>&1 && python_ok "$cand"; then command -v "$cand"; return 0; fi
  done
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for cand in $(ls -d "$pyenv_root"/versions/3.1[3-9]*/bin/python3 "$pyenv_root"/versions/3.12*/bin/python3 2>/dev/null | sort -rV); do
    if python_ok "$cand"; then echo "$cand"; return 0; fi
  done
  return 1
}

if [ ! -x .venv/bin/python ] || ! python_ok .venv/bin/python; then
  PY="$(find_python)" || { echo "delayq needs Python >= 3.12: install python3.12 or python3.13 (e.g. 'pyenv install 3.12') and try again." >&2; exit 1; }
  echo "Creating .venv with $PY"
  rm -rf .venv
  "$PY" -m venv .venv
fi

STAMP=.venv/.delayq-installed
WANT="$(cat pyproject.toml | sha256sum | cut -d' ' -f1)-${DELAYQ_EXTRAS:-dev}"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "Installing delayq and its dependencies into .venv ..."
  .venv/bin/python -m pip install -q --disable-pip-version-check -U pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${DELAYQ_EXTRAS:-dev}]"
  echo "$WANT" > "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
