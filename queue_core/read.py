"""Old import path of the read model's values (kept for one release; see docs/CHANGELOG.md): the
read model now lives in queue_core.engine.read and queue_core.engine.stats."""

from .engine.read import ErrorGroup, Page, decode_cursor, encode_cursor, position_cursor

__all__ = ["ErrorGroup", "Page", "decode_cursor", "encode_cursor", "position_cursor"]
