import pytest

from queue_core import InvalidArgument, RetryPolicy, TopicConfig
from queue_core.retry import NEVER_MS


def test_exponential_schedule_and_description():
    p = RetryPolicy.exponential(base=1, factor=2, max_delay=300, max_attempts=5)
    assert p.delays() == [1, 2, 4, 8]
    assert p.describe() == "1 s, 2 s, 4 s, 8 s, then dead after 5 attempts; about 15 s in total"


def test_cap_and_kinds():
    assert RetryPolicy.exponential(10, 10, max_delay=60, max_attempts=4).delays() == [10, 60, 60]
    assert RetryPolicy.linear(5, max_delay=12, max_attempts=4).delays() == [5, 10, 12]
    assert RetryPolicy.fixed(3, max_attempts=3).delays() == [3, 3]
    assert RetryPolicy.custom([1, 30]).max_attempts == 3
    assert RetryPolicy.custom([1, 30], max_attempts=5).delays() == [1, 30, 30, 30]


def test_single_attempt_description():
    assert RetryPolicy.fixed(1, max_attempts=1).describe() == "no retries: dead after the first failed attempt"


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="exponential", factor=0.5), "factor must be at least 1"),
    (dict(kind="fixed", base=-1), "cannot be negative"),
    (dict(kind="custom"), "needs at least one delay"),
    (dict(kind="fixed", max_attempts=0), "at least 1"),
    (dict(kind="fixed", jitter=2), "jitter"),
    (dict(kind="weekly"), "kind must be one of"),
])
def test_nonsense_is_refused_in_words(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        RetryPolicy(**kwargs)


def test_config_roundtrips_through_fields():
    cfg = TopicConfig(visibility_timeout=12.5, retry=RetryPolicy.custom([0.5, 2], jitter=0.2), dead_max_count=7,
                      events=False, paused=True)
    assert TopicConfig.from_fields(cfg.to_fields()) == cfg


def test_unknown_topic_option_is_named():
    with pytest.raises(InvalidArgument, match="unknown topic option.*visibility"):
        TopicConfig().replace(visibilty_timeout=3)


def test_configure_and_read_back(dq):
    cfg = dq.configure_topic("t", visibility_timeout=5, retry=RetryPolicy.linear(2, max_attempts=3))
    assert dq.topic_config("t") == cfg
    assert dq.topic_config("unconfigured") == TopicConfig()
    assert dq.is_configured("t") and not dq.is_configured("unconfigured")


# A policy as the engine reads it back from Redis: the factor is a float there, and a float power
# overflows (OverflowError) where an int power would only grow.
def _as_stored(policy: RetryPolicy) -> RetryPolicy:
    return RetryPolicy.from_fields(policy.to_fields())


BRIDGE_POLICY = RetryPolicy.exponential(base=1, factor=2, max_delay=60, max_attempts=20_000, jitter=0.1)
LONGEST = 2 ** 31 - 1   # the Django model's max_attempts (a PositiveIntegerField) allows no more
EXTREME = [
    BRIDGE_POLICY,
    RetryPolicy.exponential(base=1, factor=1e300, max_delay=0, max_attempts=LONGEST),       # uncapped, huge factor
    RetryPolicy.exponential(base=0.001, factor=2, max_delay=0, max_attempts=LONGEST),       # uncapped, slow
    RetryPolicy.exponential(base=0.001, factor=1.0000001, max_delay=365 * 86400, max_attempts=LONGEST),
    RetryPolicy.linear(0.001, max_delay=9e12, max_attempts=LONGEST),
    RetryPolicy.fixed(9e12, max_attempts=LONGEST),
    RetryPolicy.custom([1, 30, 600], max_attempts=LONGEST),
]


def test_finding_describe_overflows_for_the_celery_bridge_policy():
    policy = _as_stored(BRIDGE_POLICY)
    assert isinstance(policy.factor, float)
    assert policy.describe() == ("1 s, 2 s, 4 s, 8 s, 16 s, 32 s, 1 min, 1 min, …, then dead after 20,000 attempts; "
                                 "about 13 d 21 h in total (each delay +/- 10%)")
    assert policy.delay_ms(19_999) == 60_000
    # The closed form is the sum term by term, to the millisecond.
    assert policy.total_delay_ms() == sum(policy.delay_ms(a) for a in range(1, 20_000)) == 1_199_643_000


@pytest.mark.parametrize("policy", EXTREME, ids=lambda p: f"{p.kind}-{p.factor:g}-{p.max_delay:g}")
def test_finding_retry_arithmetic_overflows_for_extreme_allowed_policies(policy):
    import time

    policy = _as_stored(policy)
    started = time.perf_counter()
    text = policy.describe()
    total = policy.total_delay_ms()
    last = policy.delay_ms(policy.max_attempts)
    first = policy.delays(limit=8)
    fields = policy.to_fields()
    assert time.perf_counter() - started < 0.5
    assert f"then dead after {policy.max_attempts:,} attempts" in text and "in total" in text
    assert len(first) == 8 and all(0 <= d <= NEVER_MS / 1000 for d in first)
    assert first == sorted(first)   # these policies never shorten a delay
    assert 0 <= last <= NEVER_MS and total >= last
    assert RetryPolicy.from_fields(fields) == policy


@pytest.mark.parametrize("policy", [
    RetryPolicy.exponential(base=0.01, factor=1.001, max_delay=3000, max_attempts=50_000),  # long geometric head
    RetryPolicy.linear(0.01, max_delay=50, max_attempts=20_000),                             # long arithmetic head
    RetryPolicy.exponential(base=10, factor=10, max_delay=60, max_attempts=4),
    RetryPolicy.custom([1, 30], max_attempts=9),
])
def test_total_delay_is_the_sum_of_the_delays(policy):
    exact = sum(policy.delay_ms(a) for a in range(1, policy.max_attempts))
    assert policy.total_delay_ms() == pytest.approx(exact, rel=1e-6)
    assert policy.delays(limit=3) == policy.delays()[:3]


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="fixed", base=float("nan")), "base must be a finite number"),
    (dict(kind="exponential", factor=float("inf")), "factor must be a finite number"),
    (dict(kind="fixed", base=1e13), "a delay can be at most"),
    (dict(kind="custom", schedule=(1, float("inf"))), "finite numbers"),
])
def test_a_policy_whose_arithmetic_cannot_be_done_is_refused_in_words(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        RetryPolicy(**kwargs)
