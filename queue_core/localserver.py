"""Deprecated path, kept for one release (docs/CHANGELOG.md): this module is now
queue_core.contrib.localserver. Importing it here gives that very module (same objects)."""

import sys

from .contrib import localserver

sys.modules[__name__] = localserver
