"""Hypothesis state machine: any sequence of operations keeps every live message in exactly one
state, counts() equal to the truth, and nothing lost."""

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from queue_core import DelayQueue, LeaseLost, MessageState, RetryPolicy

TOPIC = "sm"
MAX_ATTEMPTS = 2


class QueueMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.q: DelayQueue = QueueMachine.queue
        self.q.redis.flushdb()
        # Retries are due at once, so a retrying message is promoted by the next claim.
        self.q.configure_topic(TOPIC, visibility_timeout=3600,
                               retry=RetryPolicy.fixed(0, max_attempts=MAX_ATTEMPTS))
        self.state: dict[str, MessageState] = {}
        self.held: dict[str, object] = {}     # id -> Delivery currently leased
        self.expiring: dict[str, object] = {} # lease ended, not yet reaped: a late ack still counts
        self.stale: list = []                 # reaped: their token is refused

    def ids_in(self, *states):
        return sorted(i for i, s in self.state.items() if s in states)

    @rule(n=st.integers(1, 4), later=st.booleans())
    def publish(self, n, later):
        for mid in self.q.publish_many(TOPIC, ["p"] * n, delay=3600 if later else 0):
            self.state[mid] = MessageState.pending if later else MessageState.ready

    @rule(n=st.integers(0, 5))
    def claim(self, n):
        # Upkeep in claim: due retrying -> ready first, then expired leases fail.
        for mid in self.ids_in(MessageState.retrying):
            self.state[mid] = MessageState.ready
        ready_before = set(self.ids_in(MessageState.ready))
        expired = sorted(self.expiring)
        assert set(expired) == {mid for mid in self.ids_in(MessageState.unacked) if mid not in self.held}
        got = self.q.claim(TOPIC, n)
        self.stale += [self.expiring.pop(mid) for mid in expired]
        for mid in expired:
            attempts = self.q.get(TOPIC, mid).attempts
            self.state[mid] = MessageState.dead if attempts >= MAX_ATTEMPTS else MessageState.retrying
        assert len(got) == min(n, len(ready_before))
        for d in got:
            assert d.id in ready_before
            self.state[d.id] = MessageState.unacked
            self.held[d.id] = d

    @precondition(lambda self: self.held)
    @rule(data=st.data(), action=st.sampled_from(["ack", "nack", "reject", "expire"]))
    def settle(self, data, action):
        mid = data.draw(st.sampled_from(sorted(self.held)))
        d = self.held.pop(mid)
        if action == "ack":
            self.q.ack(d)
            del self.state[mid]
        elif action == "nack":
            self.state[mid] = self.q.nack(d, "e")
            assert self.state[mid] is (MessageState.dead if d.attempt >= MAX_ATTEMPTS else MessageState.retrying)
        elif action == "reject":
            self.state[mid] = self.q.reject(d, "e")
        else:
            self.q.extend(d, 0)       # lease ends now: the next claim reaps it
            self.expiring[mid] = d

    @precondition(lambda self: self.expiring)
    @rule(data=st.data())
    def late_ack_before_reap_counts(self, data):
        """Nobody else has the message yet, so the late ack is accepted rather than redelivered."""
        mid = data.draw(st.sampled_from(sorted(self.expiring)))
        self.q.ack(self.expiring.pop(mid))
        del self.state[mid]

    @precondition(lambda self: self.stale)
    @rule()
    def stale_ack_is_refused(self):
        d = self.stale.pop()
        with pytest.raises(LeaseLost):
            self.q.ack(d)

    @precondition(lambda self: any(s is MessageState.dead for s in self.state.values()))
    @rule(data=st.data())
    def replay(self, data):
        mid = data.draw(st.sampled_from(self.ids_in(MessageState.dead)))
        assert self.q.replay(TOPIC, [mid, mid]) == 1
        self.state[mid] = MessageState.ready

    @precondition(lambda self: self.ids_in(MessageState.pending, MessageState.retrying))
    @rule(data=st.data())
    def deliver_now(self, data):
        mid = data.draw(st.sampled_from(self.ids_in(MessageState.pending, MessageState.retrying)))
        self.q.deliver_now(TOPIC, mid)
        self.state[mid] = MessageState.ready

    @precondition(lambda self: self.ids_in(MessageState.pending, MessageState.ready))
    @rule(data=st.data())
    def cancel(self, data):
        mid = data.draw(st.sampled_from(self.ids_in(MessageState.pending, MessageState.ready)))
        self.q.cancel(TOPIC, mid)
        del self.state[mid]

    @invariant()
    def every_message_in_exactly_one_state(self):
        truth = {s: 0 for s in MessageState}
        for s in self.state.values():
            truth[s] += 1
        assert self.q.counts(TOPIC) == truth
        for mid, s in self.state.items():
            assert self.q.get(TOPIC, mid).state is s
        k = self.q.keys(TOPIC)
        assert self.q.redis.hlen(k.msgs) == len(self.state) == self.q.redis.hlen(k.payloads)


def test_queue_state_machine(dq):
    QueueMachine.queue = dq
    run = QueueMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()
