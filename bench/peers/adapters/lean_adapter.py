"""The lean reference: the least a Redis delay queue can do, to measure delayq against.

Not a peer: the limit a Python worker on Redis reaches. A sorted set of due times and a hash of
payloads; one Lua script claims up to 500 due messages (moved to a processing set with a
deadline) and returns their payloads, one acks them; one thread claims, runs the handler on each
and acks the batch. No partitions, groups, retries, leases kept, events, history, ordering, TTL
or fencing: everything delayq does beyond this is what the ratio to it costs."""

import json
import sys
import time

import common
import redis

DUE, PROCESSING, MSGS = "lean:due", "lean:processing", "lean:msgs"
CLAIM = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
if #ids == 0 then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {now, first[2] or -1}
end
redis.call('ZREM', KEYS[1], unpack(ids))
local z = {}
for i, id in ipairs(ids) do z[2 * i - 1] = now + 30000; z[2 * i] = id end
redis.call('ZADD', KEYS[2], unpack(z))
return {now, 0, ids, redis.call('HMGET', KEYS[3], unpack(ids))}
"""
ACK = """
redis.call('ZREM', KEYS[1], unpack(ARGV))
return redis.call('HDEL', KEYS[2], unpack(ARGV))
"""


def _publish(pipe, seq: int, due: float, d: float) -> None:
    msg_id = f"{time.time_ns()}-{seq}"
    pipe.hset(MSGS, msg_id, json.dumps({"due_ms": due}))
    pipe.zadd(DUE, {msg_id: due})


def publish_bulk(url, delays):
    r = redis.Redis.from_url(url)
    for start in range(0, len(delays), 1000):
        pipe = r.pipeline(transaction=False)
        for i, d in enumerate(delays[start:start + 1000]):
            _publish(pipe, start + i, common.due_ms(d), d)
        pipe.execute()


def publish_one(url):
    r = redis.Redis.from_url(url)
    seq = iter(range(10**12))

    def one(due_ms, d):
        pipe = r.pipeline(transaction=False)
        _publish(pipe, next(seq), due_ms, d)
        pipe.execute()
    return one


def handler(payload: bytes) -> None:
    common.record(json.loads(payload)["due_ms"])


def worker(url, _concurrency):
    r = redis.Redis.from_url(url)
    claim, ack = r.register_script(CLAIM), r.register_script(ACK)
    while True:
        reply = claim(keys=[DUE, PROCESSING, MSGS], args=[500])
        now, next_due = int(reply[0]), int(float(reply[1]))
        if len(reply) == 2:   # nothing due: sleep until the next due time (at most 50 ms)
            time.sleep(0.05 if next_due < 0 else min(0.05, max(0.0, next_due - now) / 1000))
            continue
        ids, payloads = reply[2], reply[3]
        for payload in payloads:
            handler(payload)
        ack(keys=[PROCESSING, MSGS], args=ids)


if __name__ == "__main__":
    common.main(publish_bulk, publish_one, worker, sys.argv)
