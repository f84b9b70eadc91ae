import pytest

from queue_core import InvalidArgument, RetryPolicy, TopicConfig


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
