--[[
  counts: the number of messages in each state of one group, as one atomic snapshot. O(1).
  Backs DelayQueue.counts().

  KEYS[1..5] pending, ready, unacked, retrying, dead
  Returns {pending, ready, unacked, retrying, dead}.
]]
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5])}
