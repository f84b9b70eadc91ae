"""The only place that formats Redis key strings.

Data model (version 2)::

    topic ──< partition   (own hash tag: the partitions of a topic spread over cluster shards)
                 └──< group   (every group receives every message; own states, retries, DLQ)

A partition holds what its groups share: each message's record, header and payload in one value
(stored once, freed when the last group is done), the dedup index and the event stream. A group
holds the five state ZSETs and everything per delivery. Every key of one partition shares one
hash tag, so a script (which never spans partitions) works on Redis Cluster; every key a script
touches is passed in KEYS, but for the index log's strings (and the holding areas its sweep looks
into), which scripts name from P.ixs and P.holds: index_log_keys() says why. The schema version
sits in the prefix.

Partition 0's tag is the topic name itself (``{orders}``); partition p > 0 gets a tag chosen so
that its hash slot lies at a fixed fraction of the slot ring away from partition 0 (a van der
Corput sequence: 1/2, 1/4, 3/4, 1/8, ...). Any prefix of that sequence leaves no gap wider than
1/4 of the ring once it has 6 points, so with 6 partitions every master of an evenly split
3-master cluster holds at least one, whatever the topic's name hashes to. The tag of partition p
never depends on the partition count, so changing the count never moves partition 0.
"""

import binascii
import re
from collections import OrderedDict
from dataclasses import dataclass, fields
from functools import lru_cache

from .errors import InvalidArgument, InvalidTopic
from .states import MessageState

SCHEMA_VERSION = "v2"
TOPIC_RULE = "1-128 characters: a letter or digit first, then letters, digits, '.', '_', ':' or '-'"
GROUP_RULE = "1-64 characters: a letter or digit first, then letters, digits, '.', '_' or '-'"
_TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_GROUP_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DEFAULT_GROUP = "default"
MAX_PARTITIONS = 1024
# Topics of Celery tasks waiting in delayq (queue_core.contrib.celery_bridge): only the bridge writes them,
# and it signs what it writes; the dashboard refuses publish, edit-and-replay and configuration there.
BRIDGE_TOPIC_PREFIX = "celery."
SLOTS = 16384


def validate_topic(topic: str) -> str:
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopic(f"invalid topic name {topic!r}: topic names are {TOPIC_RULE}")
    return topic


def is_bridge_topic(topic: str) -> bool:
    """True for the Celery bridge's topics (``celery.<queue>``), which only the bridge writes."""
    return topic.startswith(BRIDGE_TOPIC_PREFIX)


def validate_group(group: str) -> str:
    if not isinstance(group, str) or not _GROUP_RE.fullmatch(group):
        raise InvalidArgument(f"invalid group name {group!r}: group names are {GROUP_RULE}")
    return group


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """What the groups of one partition share. Field order is the KEYS order of every script."""

    config: str      # HASH  topic-level configuration and the layout ("<partitions>|<g1,g2,...>")
    msgs: str        # HASH  id -> record: header "created|max|ttl|keylen|okeylen|hdrlen|" + key + okey +
                     #       headers JSON, then the payload bytes (once per message, whatever the groups)
    refs: str        # HASH  id -> groups still holding the message, when more than one
    dedup: str       # HASH  key -> id, while the message exists or its dedup window is open
    dedup_until: str  # ZSET  key -> ms its window closes (> 0), or -(window ms) while a unique_for
                      #       message lives (its window opens when it is done): includes/dedup.lua
    events: str      # STREAM one entry per script call and event kind (ids batched), see events.py
    dispatch: str    # HASH  id -> "<priority>|<fairness key>", for messages published with either (dispatch.lua)
    schedules: str   # HASH  schedule name -> its definition (JSON), for schedules homed here (engine/schedules.py)
    schedule_due: str   # ZSET  schedule name -> ms at which a scheduler should next look (absent: paused/ended)
    schedule_runs: str  # HASH  "<name>|<field>" -> a schedule's tick state (next, runs, last, ticks, ...)
    ixs: str         # HASH  the index log's state: "c" calls appended, "g" messages gone since its last sweep
                     #       began, "s" "o" "e" "w" a sweep's progress; the log itself is strings beside it,
                     #       index_log_keys() (includes/index.lua; what an entry is: queue_core/indexes.py)
    batches: str     # HASH  "<batch id>|cb" -> the batch's callbacks (JSON), "|s" sealed ms, "|c" created ms
                     #       (q.batch(); includes/batch.lua): a few fields per batch, whatever its size
    batch_of: str    # HASH  id -> its batch's id, for members of a batch (freed with the payload)
    batch_outbox: str  # ZSET "<batch id>|<group>|<complete|success|dead>" -> ms it fired: callbacks written
                       #      by the script that ended the last member, until forwarded to their topic
    batch_index: str   # ZSET batch id -> ms it was opened (or last found unfinished): what seals trim
    usage: str       # HASH  "bytes" -> the exact bytes of the records in msgs (each id + record +
                     #       RECORD_OVERHEAD_BYTES), what max_bytes is checked against; absent until exact;
                     #       "held|<hold key>" -> "<messages>|<bytes>" of a holding area (includes/usage.lua)
    holds: str       # ZSET  "<group>|<hold>" -> ms until which that holding area is kept (holds_key())

    def as_list(self) -> list[str]:
        """The keys in KEYS order: what a script of the partition alone (no group) is passed."""
        return [getattr(self, n) for n in PARTITION_KEY_NAMES]


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """One consumer group's keys inside one partition. Field order is the KEYS order after the
    partition's keys."""

    config: str      # HASH  the group's configuration (visibility timeout, retry policy, ...)
    pending: str     # ZSET  id -> due ms (held messages of an ordered group: HELD_BASE + sequence)
    ready: str       # ZSET  id -> due ms (claimed lowest first)
    unacked: str     # ZSET  id -> lease deadline ms
    retrying: str    # ZSET  id -> next attempt ms
    dead: str        # ZSET  id -> death ms
    leases: str      # HASH  id -> "token|attempt|claim ms|due ms|ordering key" while unacked
    att: str         # HASH  id -> attempts made, once an attempt failed (absent = none failed)
    info: str        # HASH  id -> JSON {rc, da, err, h, corrupt}: written off the hot path only
    tracebacks: str  # HASH  id -> last traceback (<= 8 KiB)
    fp_count: str    # HASH  fingerprint -> number of dead letters with it
    fp_info: str     # HASH  fingerprint -> JSON {t, m, first_seen, last_seen, sample}
    fp_index: str    # ZSET  score 0, member "<fp>:<death ms, 15 digits>:<id>" (lex ranges per group)
    stats: str       # HASH  lifetime counters (published, acked, ...) and the token sequence
    minutes: str     # HASH  "<epoch minute>:<event>" -> count (published, acked, dead), last hour
    workers: str     # ZSET  worker id -> last heartbeat ms (partition 0 only)
    signal: str      # LIST  wake-up tokens for this group's sleeping workers (bounded)
    expiry: str      # ZSET  id -> TTL end ms (0 = ran out while unacked), messages with a TTL only
    active: str      # HASH  ordering key -> the id that holds it (ordered groups); "\\1<key>" -> "<id>|<seq>",
                     #       its place in the line as the hold path recorded it (lua/includes/hold.lua)
    waiting: str     # ZSET  score 0, member "<okey>\\0<seq, 15 digits>\\0<due, 15 digits>\\0<id>"
    fidx: str        # ZSET  score 0, member "<fairness key>\\0<ready score, 15 digits>\\0<id>": the ready
                     #       messages by fairness key, while any has one (dispatch.lua)
    fring: str       # ZSET  fairness key -> virtual time (messages claimed / weight): whose turn is next
    fkst: str        # HASH  fairness key -> "tokens|ms": its key_rate bucket; "\\0rate" the group's, "\\0fill" a cursor
    fkinf: str       # ZSET  id -> its fairness key's slot (dispatch.lua key_slot): claimed messages per key
                     #       (max_in_flight_per_key)
    chain_parent: str    # HASH  child id -> "<parent id>|<delay ms>|<group>": published with after=, waiting
    chain_children: str  # ZSET  score 0, member "<parent id>\\0<child id>": the waiting children per parent (chain.lua)
    chain_acked: str     # ZSET  parent id -> its ack ms: acked parents whose children one call could not all release
    cancels: str     # ZSET  "<id>|<token>" -> ms until which the lease holder may still ask: leases taken by
                     #       cancel(..., running=True), told to the holder by its next extend (cancels.lua)
    journal: str     # HASH  "<id>|<k>" -> log chunk k, "<id>|n" -> chunks kept, "<id>|p" -> progress, as
                     #       handlers reported them (report.lua, includes/journal.lua)
    batches: str     # HASH  "<batch id>|<n|a|d|r>" -> members published, acked, dead, removed in this group;
                     #       "|t" -> ms a member last ended; "|complete", "|success", "|dead" -> ms the
                     #       callback fired (includes/batch.lua)
    late_holders: str  # HASH  id -> "<ms>|<holder id>": the id whose ordering key held it until ms, past its due
                       #       time, from its late release to its claim or its leaving the group (includes/lateness.lua)
    key_limits: str    # HASH  fairness key -> "<ms>|<cause>": when the key's own limit last held it back, while
                       #       the key is in the fairness ring (includes/lateness.lua, includes/dispatch.lua)
    fsolo: str         # STRING the one fairness key of every ready message while fairness is off (absent: none
                       #        has a key); while it is on, the key of the ready messages a fill has not listed yet


PARTITION_KEY_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PartitionKeys))
GROUP_KEY_NAMES: tuple[str, ...] = tuple(f.name for f in fields(GroupKeys))
# The hot hashes (msgs, leases) carry one extra field whose value is longer than any
# server's hash-max-listpack-value (64 by default): it keeps them in Redis's hashtable encoding.
# Redis keeps a hash of up to 512 short fields as a listpack, where every lookup, insert and
# delete scans or shifts the whole hash: with a few hundred leases in flight that was half of the
# Redis CPU of a claim and an ack. A hashtable never converts back, and the field keeps the key
# alive, so the encoding sticks. No message id can be "~".
HASHTABLE_FIELD = "~"
HASHTABLE_VALUE = "hashtable: this field keeps the hash out of the listpack encoding (delayq keys.py)" + "." * 200

# Held messages of an ordered group sit in pending with this score plus their sequence number:
# beyond any real due time (ms since 1970 reach 2^50 in the year 37,648), exact as a double.
HELD_BASE = 2 ** 50
# An ordered group's sequences start here (the group's `oseq` counter plus this), so a place "one
# before the first waiting" (undo's holding areas, lua/includes/hold.lua) stays positive for 10^14
# nested removals: a waiting member's 15 digits hold it, and HELD_BASE + SEQ_BASE + n stays below
# WAITING_SCORE, exact as a double. Sequences written before it (no base) stay ahead of new ones.
SEQ_BASE = 10 ** 14
# A message published with after= waits in pending with this score (beyond every held score) until
# its parent is acked in its group (lua/includes/chain.lua).
WAITING_SCORE = 2 * HELD_BASE
# Messages waiting on one parent at most: an ack releases them in its own call, so this bounds it.
MAX_CHILDREN = 100
# Records MEMORY USAGE reads per key where delayq measures memory (the budget check in publish.lua,
# q.memory()): O(64) per key, 2.4 µs on a 100,000-field hash; Redis's default of 5 read 15 % low
# with payloads of 20 to 2,000 bytes, 64 within 5 % (docs/design.md "Memory budgets").
MEMORY_SAMPLES = 64
# What Redis spends on a record of the message store beyond its id and value bytes (hashtable entry,
# string headers, allocator rounding): used_memory grew by 88-89 bytes a record over 10,000 records
# of 10 and of 100 payload bytes (Redis 7). Counted per record by includes/usage.lua.
RECORD_OVERHEAD_BYTES = 88
# A ready message's score is its due time minus this per priority level (0..MAX_PRIORITY): priority
# p is worth p minutes of waiting, so higher priorities go first among what is due, and a message
# once ready is never passed by one that became due more than MAX_PRIORITY minutes after it (no
# starvation). See lua/includes/dispatch.lua.
# The score also carries the priority itself, as p/16 in its fraction (exact in a double: a due
# time in ms needs 41 bits of its 53), so any reader turns a ready score back into the due time.
PRIORITY_STEP_MS = 60_000
MAX_PRIORITY = 9


def ready_due_ms(score: float) -> float:
    """The due time (ms) of a ready message from its ready score (lua/includes/dispatch.lua)."""
    base = int(score // 1)
    priority = round((score - base) * 16)
    return base + priority * PRIORITY_STEP_MS
# Upper bounds (ms) of the per-minute lateness histogram claim keeps in a group's minutes hash
# ("<minute>:late<i>", i = bucket index; the last bucket is everything above the last bound).
LATENESS_BOUNDS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
# Why a delivery was late, as the claim decides it (lua/includes/lateness.lua, which says when each
# applies, first match wins): Message.lateness_cause, the claimed event's `cause` column and the
# per-minute counters "<minute>:cause:<cause>" beside the histogram above.
LATENESS_CAUSES = ("key_held", "paused", "rate_limited", "concurrency_limited", "saturated", "no_worker",
                   "retry_backoff")


@dataclass(frozen=True, slots=True)
class Keys:
    """The keys one script call gets: a partition's, then one group's. Attribute access reaches
    both (``k.ready``, ``k.msgs``)."""

    topic: str
    partition: int
    group: str
    p: PartitionKeys
    g: GroupKeys

    def __getattr__(self, name: str) -> str:
        if name in PARTITION_KEY_NAMES:
            return getattr(self.p, name)
        if name in GROUP_KEY_NAMES:
            return getattr(self.g, name)
        raise AttributeError(name)

    def state(self, state: MessageState) -> str:
        return getattr(self.g, MessageState(state).value)

    def as_list(self) -> list[str]:
        return [*self.p.as_list(), *(getattr(self.g, n) for n in GROUP_KEY_NAMES)]

    def all_keys(self) -> list[str]:
        return self.as_list()


def _crc16(data: bytes) -> int:
    return binascii.crc_hqx(data, 0)   # the CRC16 (XMODEM) Redis Cluster hashes keys with


def _van_der_corput(n: int) -> float:
    out, denom = 0.0, 1.0
    while n:
        denom *= 2
        n, rest = divmod(n, 2)
        out += rest / denom
    return out


@lru_cache(maxsize=65536)
def partition_tag(topic: str, partition: int) -> str:
    """The hash tag of one partition (see the module docstring). Pure and cached."""
    if partition == 0:
        return topic
    start = _crc16(topic.encode()) % SLOTS
    target = (start + int(_van_der_corput(partition) * SLOTS)) % SLOTS
    window = SLOTS // 256   # +/- 64 slots: 1/128 of the ring, ~64 tries on average
    n = 0
    while True:
        tag = f"{topic}#{partition}" + (f"~{n}" if n else "")
        slot = _crc16(tag.encode()) % SLOTS
        if min((slot - target) % SLOTS, (target - slot) % SLOTS) <= window // 2:
            return tag
        n += 1


# The entries of a partition's indexed fields are a log in INDEX_LANES lanes, each two strings
# side by side, "<ixs>:h<lane>" (each entry's hash) and "<ixs>:i<lane>" (its message's id), plus
# "<ixs>:ht" and "<ixs>:it", a sweep's survivors (lua/includes/index.lua): a publish appends its
# call's hashes to one and their ids to the other, a lane after the other, and a query reads
# every hash, then the ids of the entries whose hash is its value's. Scripts name these keys
# themselves from P.ixs (not passed in KEYS: more keys in every publish and removal call, most of
# them untouched; they share the partition's hash tag, so they live in its slot, which Redis
# Cluster checks); this function and includes/index.lua's index_log() write the names.
INDEX_LANES = 8
# An entry's hash is INDEX_HASH_CHARS letters a..p (queue_core/indexes.py entry_hash).
INDEX_HASH_CHARS = 8


def index_log_keys(pk: "PartitionKeys") -> list[str]:
    """The index log's strings of one partition: each lane's hashes, then each lane's ids, then
    the sweep's two temporary ones."""
    return ([f"{pk.ixs}:h{lane}" for lane in range(INDEX_LANES)] + [f"{pk.ixs}:i{lane}" for lane in range(INDEX_LANES)]
            + [f"{pk.ixs}:ht", f"{pk.ixs}:it"])


def index_legacy_keys(pk: "PartitionKeys") -> list[str]:
    """The strings of the index log's earlier format (entries "<hash><id>\\n" grouped by hash),
    which make a search walk the state (engine/index.py _index_candidates) until a rebuild
    (build_index with every field ready) deletes them; a topic's deletion removes them too."""
    return [f"{pk.ixs}:{shard}" for shard in range(8)] + [f"{pk.ixs}:t"]


def partition_keys(topic: str, partition: int, prefix: str = "dq") -> PartitionKeys:
    base = f"{prefix}:{SCHEMA_VERSION}:{{{partition_tag(topic, partition)}}}:"
    return PartitionKeys(*(base + name for name in PARTITION_KEY_NAMES))


def group_keys(topic: str, partition: int, group: str, prefix: str = "dq") -> GroupKeys:
    base = f"{prefix}:{SCHEMA_VERSION}:{{{partition_tag(topic, partition)}}}:g:{group}:"
    return GroupKeys(*(base + name for name in GROUP_KEY_NAMES))


class KeyCache:
    """Keys objects by (topic, partition, group), least recently used dropped past ``size``: topic
    names arrive from URLs anyone logged in can type, so an unbounded cache would be a leak."""

    def __init__(self, prefix: str, size: int = 4096):
        self.prefix = prefix
        self.size = size
        self._items: OrderedDict[tuple[str, int, str], Keys] = OrderedDict()

    def get(self, topic: str, partition: int = 0, group: str = DEFAULT_GROUP) -> Keys:
        ident = (topic, partition, group)
        k = self._items.get(ident)
        if k is None:
            validate_topic(topic)
            validate_group(group)
            k = Keys(topic, partition, group, partition_keys(topic, partition, self.prefix),
                     group_keys(topic, partition, group, self.prefix))
            self._items[ident] = k
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        else:
            self._items.move_to_end(ident)
        return k

    def __len__(self) -> int:
        return len(self._items)


WAKE_KEY_TTL_MS = 60_000


def wake_key(signal_key: str, fetcher: str) -> str:
    """A worker fetcher's private wake-up LIST beside a group's signal list (same hash tag): the
    worker's own timer pushes to it at a due time, so a blocking wait ends on the dot. It expires
    by itself (WAKE_KEY_TTL_MS) if a worker dies holding a token."""
    return f"{signal_key}:wake:{fetcher}"


def topics_registry_key(prefix: str = "dq") -> str:
    """A SET of topic names. Outside any hash tag: written by plain commands, never by scripts."""
    return f"{prefix}:{SCHEMA_VERSION}:topics"


# Past the 30 s in which a heartbeat counts as live (six 5 s beats), so a live worker always has its details.
WORKER_DETAILS_TTL_MS = 60_000


def worker_details_key(group: str, worker_id: str, prefix: str = "dq") -> str:
    """A STRING: JSON of one worker's details (host, pid, runtime, topics, concurrency, in flight,
    start, version) that its heartbeat writes with a TTL (WORKER_DETAILS_TTL_MS) and its sign-off
    deletes. Outside every topic's hash tag: written by plain commands, never by scripts."""
    return f"{prefix}:{SCHEMA_VERSION}:worker:{group}:{worker_id}"


def schedules_registry_key(prefix: str = "dq") -> str:
    """A HASH: schedule name -> "<topic>|<partition>", the partition whose keys hold it. Outside
    any hash tag (plain commands only); schedulers read it when its version key changes."""
    return f"{prefix}:{SCHEMA_VERSION}:schedules"


def schedules_version_key(prefix: str = "dq") -> str:
    """A STRING counter bumped by every upsert and delete of a schedule: a scheduler re-reads the
    registry only when it moved (one GET per loop instead of reading the whole registry)."""
    return f"{prefix}:{SCHEMA_VERSION}:schedules:version"


def metrics_snapshot_key(prefix: str = "dq") -> str:
    """A HASH (at: Redis ms, body: the text exposition) the dashboard's refresh_metrics task writes
    and its metrics view serves while fresh (with a TTL)."""
    return f"{prefix}:{SCHEMA_VERSION}:metrics"


def archiver_lock_key(prefix: str = "dq") -> str:
    """A STRING held (with a TTL) by the one archiver run in progress; see delayq_analytics.archiver."""
    return f"{prefix}:{SCHEMA_VERSION}:archiver:lock"


def partition_of(msg_id: str) -> int:
    """The partition a message id names: ids of partition p > 0 end in ``.p``; others are 0.
    Never raises: an id that is not ours maps to partition 0, where it is simply not found."""
    head, dot, tail = msg_id.rpartition(".")
    if dot and head and tail.isascii() and tail.isdigit() and len(tail) <= 4:
        return int(tail)
    return 0


def id_for_partition(base_id: str, partition: int) -> str:
    return base_id if partition == 0 else f"{base_id}.{partition}"


def fp_member(fingerprint: str, dead_at_ms: int, msg_id: str) -> str:
    """A member of a group's error-group index (ZSET, all scores 0, read by lex range): the
    fingerprint, the time of death zero-padded to 15 digits so lex order is time order, the id.
    fp_member() in lua/includes/dead.lua writes the same; tests/queue_core/test_contracts.py
    checks that they agree."""
    return f"{fingerprint}:{dead_at_ms:015d}:{msg_id}"



def hold_key(topic: str, partition: int, group: str, hold: str, prefix: str = "dq") -> str:
    """A HASH: the holding area of one destructive operation (``hold``) in one group of one partition
    (lua/includes/hold.lua): what the operation removed, until it expires or is undone. In the
    partition's hash tag, passed to the scripts after the group's keys."""
    return f"{prefix}:{SCHEMA_VERSION}:{{{partition_tag(topic, partition)}}}:g:{group}:hold:{hold}"


def holds_key(topic: str, partition: int, prefix: str = "dq") -> str:
    """A ZSET: "<group>|<hold>" -> ms until which that holding area is kept, for the partition's
    holding areas (engine/undo.py writes it with plain commands; held() reads it)."""
    return partition_keys(topic, partition, prefix).holds
