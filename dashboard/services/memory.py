"""A topic's Redis memory for the Memory page: queue_core's ``memory()`` (MEMORY USAGE samples of
the topic's keys, INFO memory, the per-minute publish and ack counters) with each number in words."""

from dataclasses import dataclass

from .contracts import format_seconds
from .engine import get_queue


def size_words(n: float) -> str:
    """Bytes for people: '512 B', '4.6 KB', '1.2 GB' (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def percent_words(fraction: float) -> str:
    """A share for people, never in exponent notation: 'under 0.01 %', '0.47 %', '2.4 %', '98 %',
    '150 %' (Python's '.2g' wrote 99.5 % as '1e+02' and 0.00002 % as '2e-05')."""
    p = fraction * 100
    if p == 0:
        return "0 %"
    if p < 0.01:
        return "under 0.01 %"
    return f"{p:.2g} %" if p < 10 else f"{p:,.0f} %"


@dataclass(frozen=True)
class MemoryView:
    m: object   # queue_core.TopicMemory

    @property
    def size(self) -> str:
        m = self.m
        each = f" (~{size_words(m.bytes_per_message)} a message)" if m.bytes_per_message else ""
        held = (f" {m.held_messages:,} held for undo take {size_words(m.held_bytes)} more (counted in the budget)."
                if m.held_messages else "")
        return (f"{m.messages:,} message{'s' if m.messages != 1 else ''} take ~{size_words(m.estimated_bytes)}"
                f"{each}, with {size_words(m.fixed_bytes)} of keys that do not grow per message (events stream, "
                f"configuration), measured over {m.keys_sampled} key{'s' if m.keys_sampled != 1 else ''}.{held}")

    @property
    def share(self) -> str:
        m = self.m
        server = f"Redis uses {size_words(m.used_memory)} in all"
        if not m.maxmemory:
            return f"{server}; no maxmemory is set, so there is no share and no time to full (set one in production)."
        return (f"That is {percent_words(m.share)} of maxmemory ({size_words(m.maxmemory)}, policy "
                f"{m.maxmemory_policy}); {server} ({percent_words(m.used_memory / m.maxmemory)}).")

    @property
    def growth(self) -> str:
        m = self.m
        rates = (f"{m.publish_rate:,.1f}/s published, {m.ack_rate:,.1f}/s acked over the last {m.rate_minutes} "
                 f"minutes{', all the history there is' if m.rate_all_history else ''}")
        if m.growth_rate <= 0:
            return f"Not growing ({rates})."
        # time_to_full: the room left under maxmemory over this topic's growth (published minus
        # acked, not the publish rate alone) times its bytes per message; other topics' not counted.
        if m.time_to_full is not None:
            full = (f"Redis is full in ~{format_seconds(m.time_to_full)} at this growth (published minus acked; "
                    "only this topic's growth is counted)")
        elif not m.maxmemory:
            full = "no time to full, as no maxmemory is set"
        else:
            full = "no time to full yet: no message is stored to measure the bytes one takes"
        return f"Growing by {m.growth_rate:,.1f} messages/s ({rates}): {full}."

    @property
    def budget(self) -> str:
        m = self.m
        if not (m.max_messages or m.max_bytes):
            return ("No budget: publishing is refused only when Redis itself is full. Set max_messages or max_bytes "
                    "(the admin's Memory budget) to refuse it earlier with a clear error.")
        parts = []
        if m.max_messages:
            parts.append(f"{m.max_messages:,} messages ({m.share_of(m.max_messages):,} per partition; "
                         f"{m.messages:,} stored)")
        if m.max_bytes:
            parts.append(f"{size_words(m.max_bytes)} of message store ({size_words(m.share_of(m.max_bytes))}"
                         f" per partition; {size_words(m.store_bytes)} used)")
        when = (f" At the current growth publishing is refused in ~{format_seconds(m.time_to_budget)}."
                if m.time_to_budget is not None else "")
        return "Budget: " + " and ".join(parts) + "." + when


def topic_memory(topic: str) -> MemoryView:
    """One call of queue_core's memory() (two round trips)."""
    return MemoryView(get_queue().memory(topic))


# From this use of its budget on, a topic's row and page say how full it is (below, nothing).
NEAR_FULL = 0.8


@dataclass(frozen=True)
class BudgetBadge:
    fullness: float      # the fullest partition's use of its share (BudgetUse.fullness)
    full_partitions: int       # partitions at their share: publishes routed there are refused
    partitions: int

    @property
    def full(self) -> bool:
        return self.fullness >= 1.0

    @property
    def all_full(self) -> bool:
        """Every partition is full: no publish to the topic gets in (else only those routed to a full one)."""
        return self.full and self.full_partitions >= self.partitions

    @property
    def where(self) -> str:
        return f"full in {self.full_partitions} of {self.partitions} partitions"

    @property
    def words(self) -> str:
        if self.full:
            return "budget full" if self.all_full else f"budget {self.where}"
        return f"{self.fullness * 100:.0f} % of budget"

    @property
    def title(self) -> str:
        if self.full and not self.all_full:
            return (f"Memory budget {self.where}: publishes routed there are refused (TopicFull, HTTP 507) "
                    "until messages leave; the other partitions take theirs. The Memory page has the numbers.")
        if self.full:
            return ("Memory budget full: publishing is refused (TopicFull, HTTP 507) until messages leave. "
                    "The Memory page has the numbers.")
        return (f"The fullest partition holds {self.fullness * 100:.0f} % of its share of the memory budget; "
                "publishing is refused at 100 %. The Memory page has the numbers.")


def budget_badges(names: list[str]) -> dict[str, BudgetBadge]:
    """{topic: badge} for those of ``names`` whose budget is NEAR_FULL or more used: the engine's
    budget_use (the counts publish.lua checks; a few pipelines for any number of topics), not
    memory(), which samples every key of a topic (~60 commands and ~3 ms a topic: 170 ms for a
    page of 50 topics, against 9 ms for budget_use of the 50)."""
    uses = get_queue().budget_use(names) if names else {}
    return {name: BudgetBadge(u.fullness, u.full_partitions, u.partitions) for name, u in uses.items()
            if u.fullness >= NEAR_FULL}


def budget_badge(name: str) -> BudgetBadge | None:
    return budget_badges([name]).get(name)
