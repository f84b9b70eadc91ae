--@include common
--[[
  ack: unacked -> gone, for a batch of deliveries. Backs DelayQueue.ack/ack_many.

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] actor
  ARGV[2..] pairs: id, token

  Returns one code per pair: 0 acked, -3 lease lost (token stale, lease expired or already acked).
]]
local cfg = load_config()
local ts = now_ms()
local actor = ARGV[1]
local out = {}
local acked = 0
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local lease = held_lease(id, token)
  if lease and redis.call('ZREM', K.unacked, id) == 1 then
    delete_data(id, lease.key)
    emit(cfg, {'event', 'acked', 'msg', id, 'ts', ts, 'attempt', lease.att, 'handler_ms', ts - lease.ct, 'actor', actor})
    acked = acked + 1
    out[#out + 1] = 0
  else
    out[#out + 1] = -3
  end
end
if acked > 0 then
  redis.call('HINCRBY', K.stats, 'acked', acked)
  count_minute(ts, 'acked', acked)
end
return out
