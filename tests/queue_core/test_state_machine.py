"""Hypothesis state machine: any sequence of operations, in any group of a topic with several
partitions, keeps every live message in exactly one state per group, counts() equal to the truth,
each payload stored once while any group holds it, and nothing lost. Chained messages
(publish(after=)) wait in their group until its ack of the parent, or die with ParentGone when the
parent is cancelled, and the chain index holds exactly the waiting ones."""

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from queue_core import DelayQueue, LeaseLost, MessageState, RetryPolicy, StateConflict

from .helpers import entries

TOPIC = "sm"
MAX_ATTEMPTS = 2


class QueueMachine(RuleBasedStateMachine):
    partitions = 1
    groups: tuple[str, ...] = ("default",)

    def __init__(self):
        super().__init__()
        self.q: DelayQueue = QueueMachine.queue
        self.q.redis.flushdb()
        # Retries are due at once, so a retrying message is promoted by the next claim.
        policy = RetryPolicy.fixed(0, max_attempts=MAX_ATTEMPTS)
        self.q.configure_topic(TOPIC, visibility_timeout=3600, retry=policy, partitions=self.partitions)
        for g in self.groups:
            self.q.configure_group(TOPIC, g, visibility_timeout=3600, retry=policy)
        self.state: dict[tuple[str, str], MessageState] = {}   # (group, id) -> state
        self.held: dict[tuple[str, str], object] = {}          # leased deliveries
        self.expiring: dict[tuple[str, str], object] = {}      # lease ended, not yet reaped: a late ack counts
        self.stale: list = []                                   # reaped: their token is refused
        self.waiting: dict[tuple[str, str], str] = {}          # (group, child id) -> parent id

    def ids_in(self, group, *states):
        return sorted(i for (g, i), s in self.state.items() if g == group and s in states)

    @rule(n=st.integers(1, 4), later=st.booleans(), data=st.data())
    def publish(self, n, later, data):
        # The partition is drawn (not left to the client's rotation, which carries over between
        # examples and would make them irreproducible).
        p = data.draw(st.integers(0, self.partitions - 1))
        for mid in self.q.publish_many(TOPIC, ["p"] * n, delay=3600 if later else 0, partition=p):
            for g in self.groups:
                self.state[(g, mid)] = MessageState.pending if later else MessageState.ready

    def parent_left(self, g, mid, acked):
        """The model of includes/chain.lua: an ack releases the children (delay 0: ready), any
        other leaving makes them dead letters; a leaving child unlinks itself."""
        self.waiting.pop((g, mid), None)
        for key, parent in sorted(self.waiting.items()):
            if key[0] == g and parent == mid:
                del self.waiting[key]
                self.state[key] = MessageState.ready if acked else MessageState.dead

    @precondition(lambda self: self.state)
    @rule(data=st.data())
    def publish_after(self, data):
        g, parent = data.draw(st.sampled_from(sorted(self.state)))
        child = self.q.publish(TOPIC, "c", after=parent, group=g)
        self.state[(g, child)] = MessageState.pending
        self.waiting[(g, child)] = parent

    @rule(n=st.integers(0, 5), data=st.data())
    def claim(self, n, data):
        g = data.draw(st.sampled_from(self.groups))
        # Upkeep runs in every partition's claim: due retrying -> ready first, then expired leases fail.
        for mid in self.ids_in(g, MessageState.retrying):
            self.state[(g, mid)] = MessageState.ready
        ready_before = set(self.ids_in(g, MessageState.ready))
        expired = sorted(k for k in self.expiring if k[0] == g)
        assert {k[1] for k in expired} == {mid for mid in self.ids_in(g, MessageState.unacked)
                                           if (g, mid) not in self.held}
        got = []
        for p in range(self.partitions):
            got += self.q.claim_batch(TOPIC, n - len(got), group=g, partition=p).deliveries
        self.stale += [self.expiring.pop(k) for k in expired]
        for key in expired:
            attempts = self.q.get(TOPIC, key[1], group=g).attempts
            self.state[key] = MessageState.dead if attempts >= MAX_ATTEMPTS else MessageState.retrying
        assert len(got) == min(n, len(ready_before))
        for d in got:
            assert d.id in ready_before and d.group == g
            self.state[(g, d.id)] = MessageState.unacked
            self.held[(g, d.id)] = d

    @precondition(lambda self: self.held)
    @rule(data=st.data(), action=st.sampled_from(["ack", "nack", "reject", "expire"]))
    def settle(self, data, action):
        key = data.draw(st.sampled_from(sorted(self.held)))
        d = self.held.pop(key)
        if action == "ack":
            self.q.ack(d)
            del self.state[key]
            self.parent_left(*key, acked=True)
        elif action == "nack":
            self.state[key] = self.q.nack(d, "e")
            assert self.state[key] is (MessageState.dead if d.attempt >= MAX_ATTEMPTS else MessageState.retrying)
        elif action == "reject":
            self.state[key] = self.q.reject(d, "e")
        else:
            self.q.extend(d, 0)       # lease ends now: the next claim reaps it
            self.expiring[key] = d

    @precondition(lambda self: self.expiring)
    @rule(data=st.data())
    def late_ack_before_reap_counts(self, data):
        """Nobody else has the message yet, so the late ack is accepted rather than redelivered."""
        key = data.draw(st.sampled_from(sorted(self.expiring)))
        self.q.ack(self.expiring.pop(key))
        del self.state[key]
        self.parent_left(*key, acked=True)

    @precondition(lambda self: self.stale)
    @rule()
    def stale_ack_is_refused(self):
        d = self.stale.pop()
        with pytest.raises(LeaseLost):
            self.q.ack(d)

    @precondition(lambda self: any(s is MessageState.dead for s in self.state.values()))
    @rule(data=st.data())
    def replay(self, data):
        g, mid = data.draw(st.sampled_from(sorted(k for k, s in self.state.items() if s is MessageState.dead)))
        assert self.q.replay(TOPIC, [mid, mid], group=g) == 1
        self.state[(g, mid)] = MessageState.ready

    @precondition(lambda self: any(s in (MessageState.pending, MessageState.retrying) for s in self.state.values()))
    @rule(data=st.data())
    def deliver_now(self, data):
        # A waiting message is refused, like a held one: only its parent's ack makes it due.
        g, mid = data.draw(st.sampled_from(sorted(
            k for k, s in self.state.items() if s in (MessageState.pending, MessageState.retrying))))
        if (g, mid) in self.waiting:
            with pytest.raises(StateConflict):
                self.q.deliver_now(TOPIC, mid, group=g)
            return
        self.q.deliver_now(TOPIC, mid, group=g)
        self.state[(g, mid)] = MessageState.ready

    @precondition(lambda self: any(s in (MessageState.pending, MessageState.ready) for s in self.state.values()))
    @rule(data=st.data())
    def cancel(self, data):
        g, mid = data.draw(st.sampled_from(sorted(
            k for k, s in self.state.items() if s in (MessageState.pending, MessageState.ready))))
        self.q.cancel(TOPIC, mid, group=g)
        del self.state[(g, mid)]
        self.parent_left(g, mid, acked=False)

    @invariant()
    def every_message_in_exactly_one_state_per_group(self):
        for g in self.groups:
            truth = dict.fromkeys(MessageState, 0)
            for (group, _mid), s in self.state.items():
                if group == g:
                    truth[s] += 1
            assert self.q.counts(TOPIC, group=g) == truth
        for (g, mid), s in self.state.items():
            assert self.q.get(TOPIC, mid, group=g).state is s
        live = {mid for _g, mid in self.state}
        stored = sum(entries(self.q, self.q.keys(TOPIC, p).msgs) for p in range(self.partitions))
        assert stored == len(live)   # once per message, freed by the last group

    @invariant()
    def the_chain_index_holds_exactly_the_waiting_messages(self):
        for g in self.groups:
            links, members = {}, set()
            for p in range(self.partitions):
                k = self.q.keys(TOPIC, p, g)
                links.update({c.decode(): v.decode().split("|")[0] for c, v in self.q.redis.hgetall(k.chain_parent).items()})
                members |= {m.decode() for m in self.q.redis.zrange(k.chain_children, 0, -1)}
            want = {c: parent for (group, c), parent in self.waiting.items() if group == g}
            assert links == want
            assert members == {f"{parent}\0{c}" for c, parent in want.items()}
            for c, parent in want.items():
                assert self.q.get(TOPIC, c, group=g).waiting_for == parent


# The machine configures its own topic in both shapes (this parametrize): own_layout keeps the dq
# fixture from multiplying them by its shapes too (it would run each shape twice over).
@pytest.mark.own_layout
@pytest.mark.parametrize("partitions, groups", [(1, ("default",)), (3, ("default", "billing"))],
                         ids=["v1-shape", "3-partitions-2-groups"])
def test_queue_state_machine(dq, partitions, groups):
    QueueMachine.queue = dq
    QueueMachine.partitions = partitions
    QueueMachine.groups = groups
    run = QueueMachine.TestCase
    run.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                            suppress_health_check=list(HealthCheck))
    run().runTest()
