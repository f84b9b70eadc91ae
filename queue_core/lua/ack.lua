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
local ids, tokens = {}, {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i]; tokens[#tokens + 1] = ARGV[i + 1] end
-- One read of all leases and one removal per structure for the batch (see claim.lua).
local leases = redis.call('HMGET', K.leases, unpack(ids))
local out, ok_ids, seen = {}, {}, {}
for j, id in ipairs(ids) do
  local lease = parse_lease(leases[j])
  if lease and lease.tok == tokens[j] and not seen[id] then
    -- A lease exists only while the id is in unacked (claim sets both; ack, fail and quarantine
    -- clear both), so the lease check is the unacked check.
    seen[id] = true
    ok_ids[#ok_ids + 1] = id
    if lease.key ~= '' and redis.call('HGET', K.dedup, lease.key) == id then redis.call('HDEL', K.dedup, lease.key) end
    emit(cfg, {'event', 'acked', 'msg', id, 'ts', ts, 'attempt', lease.att, 'handler_ms', ts - lease.ct, 'actor', actor})
    out[j] = 0
  else
    out[j] = -3
  end
end
if #ok_ids > 0 then
  redis.call('ZREM', K.unacked, unpack(ok_ids))
  for _, key in ipairs({K.leases, K.meta, K.payloads, K.tracebacks}) do redis.call('HDEL', key, unpack(ok_ids)) end
  redis.call('HINCRBY', K.stats, 'acked', #ok_ids)
  count_minute(ts, 'acked', #ok_ids)
end
return out
