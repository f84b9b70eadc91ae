--@include common
--[[
  purge: delete up to ARGV[2] messages of one state (never unacked). Backs DelayQueue.purge(),
  which calls it until it returns 0 so Redis is never blocked by a large purge.

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] state   ARGV[2] batch size   ARGV[3] actor   ARGV[4] cutoff ms: only members scored <= cutoff

  Returns the number deleted.
]]
local cfg = load_config()
local ts = now_ms()
local state, batch, actor, cutoff = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local ids = redis.call('ZRANGEBYSCORE', K[state], '-inf', cutoff, 'LIMIT', 0, batch)
for _, id in ipairs(ids) do
  local meta = load_meta(id)
  if state == 'dead' then unindex_dead(id, meta) else redis.call('ZREM', K[state], id) end
  delete_data(id, meta and meta.key)
  emit(cfg, {'event', 'deleted', 'msg', id, 'ts', ts, 'attempt', meta and meta.att or 0, 'from', state,
    'fp', meta and fp_of(meta) or 'none', 'actor', actor})
end
if #ids > 0 then redis.call('HINCRBY', K.stats, 'deleted', #ids) end
return #ids
