--@include common
--[[
  get: one message with its state and score. Read only; O(1). Backs DelayQueue.get().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] id
  Returns {state or '', score or -1, meta_json or '', payload or false, traceback or ''}.
]]
local id = ARGV[1]
local state, score = state_of(id)
return {state or '', score or -1, redis.call('HGET', K.meta, id) or '', redis.call('HGET', K.payloads, id) or false,
  redis.call('HGET', K.tracebacks, id) or ''}
