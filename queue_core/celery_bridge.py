"""Deprecated path, kept for one release (docs/CHANGELOG.md): this module is now
queue_core.contrib.celery_bridge. Importing it here gives that very module (same objects)."""

import sys

from .contrib import celery_bridge

sys.modules[__name__] = celery_bridge
