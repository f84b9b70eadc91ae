"""The dashboard's side of the event archive: run the archiver, restore evicted messages from it.

pyarrow comes with the ``analytics`` extra; without it these functions raise ArchiveUnavailable
saying what to install, and the rest of the dashboard works as before.
"""

import os

from django.conf import settings

from . import services


class ArchiveUnavailable(RuntimeError):
    pass


def archive_dir() -> str:
    return str(getattr(settings, "DELAYQ_ARCHIVE_DIR", "var/archive"))


def _pipeline():
    try:
        from pipeline import archiver
    except ImportError as exc:  # pyarrow missing
        raise ArchiveUnavailable(f"the event archive needs pyarrow ({exc}); install it with "
                                 f"`pip install 'delayq[analytics]'`") from exc
    return archiver


def run_archiver(topics: list[str] | None = None):
    """One bounded archiver run over every topic (or ``topics``); returns its ArchiveReport."""
    archiver = _pipeline()
    try:
        worker = archiver.Archiver(services.get_queue(), archive_dir())
    except ValueError as exc:
        raise ArchiveUnavailable(str(exc)) from exc
    os.makedirs(worker.root, exist_ok=True)
    return worker.run_once(topics)
