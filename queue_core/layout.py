"""A topic's layout (how many partitions, which groups) and how a message finds its partition.

The layout is stored as ``"<partitions>|<g1,g2,...>"`` in every partition's config hash;
partition 0's copy is the source of truth. Clients cache it for a short while: publish.lua refuses
a stale layout (code -7) and the client reloads it and routes again, so a cache can never send a
message past the last partition or past a group that was added.
"""

import itertools
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from .errors import InvalidArgument
from .keys import DEFAULT_GROUP


@dataclass(frozen=True, slots=True)
class TopicLayout:
    partitions: int
    groups: tuple[str, ...]
    # The topic's indexed fields as stored (the config's 'indexes' field, JSON [[slot, field], ...];
    # '' for none): publish sends it back and the script refuses a stale one (queue_core/indexes.py).
    indexes: str = ""

    @property
    def signature(self) -> str:
        return f"{self.partitions}|{','.join(self.groups)}"

    @classmethod
    def parse(cls, raw: bytes | str | None, indexes: bytes | str | None = None) -> "TopicLayout":
        ix = (indexes.decode() if isinstance(indexes, bytes) else indexes) or ""
        if raw is None:
            return DEFAULT_LAYOUT if not ix else cls(1, (DEFAULT_GROUP,), ix)
        text = raw.decode() if isinstance(raw, bytes) else raw
        parts, _, groups = text.partition("|")
        return cls(int(parts), tuple(g for g in groups.split(",") if g), ix)


DEFAULT_LAYOUT = TopicLayout(1, (DEFAULT_GROUP,))


def route_hash(value: str) -> int:
    """Stable across processes and versions (unlike hash()): CRC-32 of the UTF-8 bytes."""
    return zlib.crc32(value.encode("utf-8"))


class Router:
    """Picks a partition for each publish: explicit, by ordering key, by dedup key, or spread
    evenly (a per-topic rotation)."""

    def __init__(self):
        self._spread: dict[str, itertools.count] = {}

    def partition(self, topic: str, layout: TopicLayout, *, key: str | None = None, order_key: str | None = None,
                  partition: int | None = None, fairness_key: str | None = None) -> int:
        if partition is not None:
            if not isinstance(partition, int) or not 0 <= partition < layout.partitions:
                raise InvalidArgument(f"partition {partition!r} does not exist in topic {topic!r}, which has "
                                      f"{layout.partitions} partition(s) (0 to {layout.partitions - 1})")
            return partition
        if layout.partitions == 1:
            return 0
        # The ordering key wins: all messages of one key must share a partition to keep their order.
        # Then the dedup key (unique per partition), then the fairness key (a key's messages in one
        # partition keep its per-key limits exact).
        basis = order_key or key or fairness_key
        if basis:
            return route_hash(basis) % layout.partitions
        return self.spread(topic) % layout.partitions

    def spread(self, topic: str) -> int:
        counter = self._spread.get(topic)
        if counter is None:
            counter = self._spread.setdefault(topic, itertools.count())
        return next(counter)


class LayoutCache:
    """Layouts by topic for ``ttl`` seconds, least recently used dropped past ``size``."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._items: OrderedDict[str, tuple[TopicLayout, float]] = OrderedDict()

    def get(self, topic: str, now: float, ttl: float) -> TopicLayout | None:
        item = self._items.get(topic)
        if item is None or now - item[1] > ttl:
            return None
        self._items.move_to_end(topic)
        return item[0]

    def put(self, topic: str, layout: TopicLayout, now: float) -> None:
        self._items[topic] = (layout, now)
        self._items.move_to_end(topic)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def drop(self, topic: str) -> None:
        self._items.pop(topic, None)
