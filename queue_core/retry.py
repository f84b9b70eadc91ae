"""Retry policies. The engine applies them inside nack.lua (``retry_delay_ms`` in
lua/includes/fail.lua); ``RetryPolicy.delay_ms`` is the same formula in Python, used for
previews and to write the topic's configuration. tests/queue_core/test_nack.py checks that both
agree.

Every computation here is closed-form in the number of attempts: a policy may allow thousands of
attempts (the Celery bridge's allows 20,000) and an exponential delay overflows a float long
before that, so nothing raises ``factor ** attempt`` blindly or walks every attempt.
"""

import math
from dataclasses import dataclass, field
from typing import Literal

from .errors import InvalidArgument

Kind = Literal["fixed", "linear", "exponential", "custom"]
KINDS: tuple[str, ...] = ("fixed", "linear", "exponential", "custom")
# Nominal delays saturate here (~285,000 years, the largest exactly representable float integer):
# an uncapped exponential delay grows past any float, the engine then waits as good as forever.
NEVER_MS = 2 ** 53
EXACT_TERMS = 1000   # leading delays summed one by one before a policy's delays turn constant


def format_seconds(seconds: float) -> str:
    """'500 ms', '4 s', '2 min 5 s', '1 h 30 min', '2 d 3 h': short and exact enough for people."""
    if seconds >= 100 * 365 * 86400:   # beyond a century days are no longer a useful unit
        return f"{seconds / (365 * 86400):,.0f} years"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:g} s" if seconds < 10 else f"{round(seconds)} s"
    parts = []
    rest = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size} {unit}")
            rest %= size
    return " ".join(parts[:2])


def policy_problems(kind: str, base: float, factor: float, max_delay: float, schedule, jitter: float,
                    max_attempts: int) -> list[tuple[str, str]]:
    """The rules of a retry policy as (field, message) pairs; the Django form maps the fields."""
    out = []
    numbers = {"base": base, "factor": factor, "max_delay": max_delay, "jitter": jitter}
    for name, value in numbers.items():
        if not isinstance(value, int | float) or not math.isfinite(value):
            out.append((name, f"{name} must be a finite number, not {value!r}"))
    if any(not isinstance(d, int | float) or not math.isfinite(d) for d in schedule):
        out.append(("schedule", "delays in the schedule must be finite numbers"))
    if out:
        return out
    if kind not in KINDS:
        out.append(("kind", f"kind must be one of {', '.join(KINDS)}, not {kind!r}"))
    if base < 0:
        out.append(("base", "the base delay cannot be negative"))
    if kind == "exponential" and factor < 1:
        out.append(("factor", "the factor must be at least 1 (a factor below 1 would shrink the delays)"))
    if max_delay < 0:
        out.append(("max_delay", "the maximum delay cannot be negative (use 0 for no cap)"))
    if kind == "custom" and not schedule:
        out.append(("schedule", "a custom schedule needs at least one delay"))
    if any(d < 0 for d in schedule):
        out.append(("schedule", "delays in the schedule cannot be negative"))
    if not 0 <= jitter <= 1:
        out.append(("jitter", "jitter is a fraction between 0 and 1 (0.1 = +/- 10 %)"))
    if max(base, max_delay, *schedule) * 1000 > NEVER_MS:
        out.append(("max_delay" if max_delay * 1000 > NEVER_MS else "base",
                    f"a delay can be at most {NEVER_MS // 1000:,} s (about 285,000 years)"))
    if max_attempts < 1:
        out.append(("max_attempts", "max attempts must be at least 1"))
    return out


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait after a failed attempt, and how many attempts before dead-lettering.

    ``max_attempts`` counts every delivery, the first included: 5 means 1 try + 4 retries.
    Delays are seconds; ``max_delay`` caps every delay (0 = no cap); ``jitter`` spreads each delay
    uniformly by +/- that fraction so retries of a burst do not all land together.
    """

    kind: Kind = "exponential"
    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    schedule: tuple[float, ...] = field(default=())
    jitter: float = 0.0
    max_attempts: int = 5

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise InvalidArgument("invalid retry policy: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every rule this policy breaks, in words a person understands (empty when valid)."""
        return [message for _field, message in policy_problems(
            self.kind, self.base, self.factor, self.max_delay, self.schedule, self.jitter, self.max_attempts)]

    @classmethod
    def fixed(cls, delay: float, *, max_attempts: int = 5, jitter: float = 0.0) -> "RetryPolicy":
        return cls("fixed", base=delay, max_delay=0, jitter=jitter, max_attempts=max_attempts)

    @classmethod
    def linear(cls, base: float, *, max_delay: float = 300.0, max_attempts: int = 5,
               jitter: float = 0.0) -> "RetryPolicy":
        return cls("linear", base=base, max_delay=max_delay, jitter=jitter, max_attempts=max_attempts)

    @classmethod
    def exponential(cls, base: float = 1.0, factor: float = 2.0, *, max_delay: float = 300.0,
                    max_attempts: int = 5, jitter: float = 0.0) -> "RetryPolicy":
        return cls("exponential", base=base, factor=factor, max_delay=max_delay, jitter=jitter,
                   max_attempts=max_attempts)

    @classmethod
    def custom(cls, schedule: list[float] | tuple[float, ...], *, max_attempts: int | None = None,
               jitter: float = 0.0) -> "RetryPolicy":
        """Delays in order; the last one repeats. max_attempts defaults to len(schedule) + 1."""
        sched = tuple(float(s) for s in schedule)
        return cls("custom", schedule=sched, max_delay=0, jitter=jitter,
                   max_attempts=max_attempts if max_attempts is not None else len(sched) + 1)

    def _ceiling_ms(self) -> float:
        cap = self.max_delay * 1000
        return min(cap, NEVER_MS) if cap > 0 else NEVER_MS

    def _nominal_ms(self, attempt: int) -> float:
        """The delay before the cap; math.inf where it exceeds NEVER_MS (never an OverflowError)."""
        base_ms = self.base * 1000
        if self.kind == "fixed":
            return base_ms
        if self.kind == "linear":
            return base_ms * attempt
        if self.kind == "exponential":
            if base_ms == 0 or self.factor == 1:
                return base_ms
            # factor ** (attempt - 1) raises OverflowError once it passes ~1.8e308: compare the
            # logarithms first (the margin of 1 absorbs their rounding).
            if math.log(base_ms) + (attempt - 1) * math.log(self.factor) > math.log(NEVER_MS) + 1:
                return math.inf
            return base_ms * self.factor ** (attempt - 1)
        return self.schedule[min(attempt, len(self.schedule)) - 1] * 1000

    def delay_ms(self, attempt: int) -> int:
        """Nominal delay (no jitter) after failed attempt ``attempt`` (1-based), in ms."""
        d = self._nominal_ms(attempt)
        cap = self.max_delay * 1000
        if cap > 0 and d > cap:
            d = cap
        return int(min(d, NEVER_MS))

    def _constant_from(self) -> int:
        """The attempt after which every delay equals the last one computed (the cap, the last
        scheduled delay, or NEVER_MS): the head of the sequence worth computing one by one."""
        if self.kind == "fixed":
            return 1
        if self.kind == "custom":
            return len(self.schedule)
        base_ms, ceiling = self.base * 1000, self._ceiling_ms()
        if base_ms == 0 or base_ms >= ceiling or (self.kind == "exponential" and self.factor == 1):
            return 1
        if self.kind == "linear":
            return math.ceil(ceiling / base_ms) + 1
        return math.ceil(math.log(ceiling / base_ms) / math.log(self.factor)) + 2

    def total_delay_ms(self) -> int:
        """The sum of the nominal delays of every retry (max_attempts - 1 of them), in ms: the head
        term by term, the constant tail as one product; a head too long to walk (a factor barely
        above 1, a tiny linear step) as the arithmetic or geometric series it is."""
        retries = self.max_attempts - 1
        if retries <= 0:
            return 0
        head = min(retries, self._constant_from())
        if head <= EXACT_TERMS:
            total = sum(self.delay_ms(a) for a in range(1, head + 1))
            return total + (retries - head) * self.delay_ms(head + 1 if head < retries else head)
        base_ms, ceiling = self.base * 1000, self._ceiling_ms()
        if self.kind == "linear":
            below = min(retries, math.floor(ceiling / base_ms))      # attempts not yet capped
            head_sum = base_ms * below * (below + 1) / 2
        else:   # exponential, 1 < factor and the cap far away
            growth = math.log(self.factor)
            below = min(retries, math.floor(math.log(ceiling / base_ms) / growth) + 1)
            head_sum = base_ms * math.expm1(below * growth) / (self.factor - 1)
        return int(head_sum) + (retries - below) * int(ceiling)

    def delays(self, limit: int | None = None) -> list[float]:
        """Seconds waited after each failed attempt that is retried (max_attempts - 1 of them), or
        only the first ``limit``: a policy may allow millions of attempts."""
        count = self.max_attempts - 1 if limit is None else min(limit, self.max_attempts - 1)
        return [self.delay_ms(a) / 1000 for a in range(1, count + 1)]

    def describe(self) -> str:
        """'1 s, 2 s, 4 s, 8 s, then dead after 5 attempts; about 15 s in total'."""
        delays = self.delays(limit=9)
        if not delays:
            return "no retries: dead after the first failed attempt"
        shown = [format_seconds(d) for d in delays[:8]]
        if len(delays) > 8:
            shown.append("…")
        text = f"{', '.join(shown)}, then dead after {self.max_attempts:,} attempts; " \
               f"about {format_seconds(self.total_delay_ms() / 1000)} in total"
        if self.jitter:
            text += f" (each delay +/- {self.jitter:.0%})"
        return text

    def to_fields(self) -> dict[str, str]:
        """The fields stored in the topic's config hash, read by nack.lua."""
        return {
            "retry_kind": self.kind,
            "retry_base_ms": str(int(self.base * 1000)),
            "retry_factor": repr(float(self.factor)),
            "retry_max_delay_ms": str(int(self.max_delay * 1000)),
            "retry_schedule_ms": ",".join(str(int(s * 1000)) for s in self.schedule),
            "retry_jitter": repr(float(self.jitter)),
            "max_attempts": str(self.max_attempts),
        }

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> "RetryPolicy":
        sched = fields.get("retry_schedule_ms", "")
        return cls(
            kind=fields["retry_kind"],  # type: ignore[arg-type]
            base=int(fields["retry_base_ms"]) / 1000,
            factor=float(fields["retry_factor"]),
            max_delay=int(fields["retry_max_delay_ms"]) / 1000,
            schedule=tuple(int(s) / 1000 for s in sched.split(",") if s),
            jitter=float(fields["retry_jitter"]),
            max_attempts=int(fields["max_attempts"]),
        )
