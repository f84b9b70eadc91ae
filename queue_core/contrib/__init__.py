"""Integrations around the engine that it does not need to run, each optional (with its own
third-party library); their old import paths re-export them for one release (docs/CHANGELOG.md)."""
