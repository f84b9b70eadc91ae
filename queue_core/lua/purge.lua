--@include common
--[[
  purge: delete up to ARGV[2] messages of one state of one group (never unacked). Backs
  DelayQueue.purge(), which calls it until it returns less than the batch, so Redis is never
  blocked by a large purge.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] state   ARGV[2] batch size   ARGV[3] actor   ARGV[4] cutoff ms: only members scored <= cutoff
  ARGV[5] group

  Returns the number deleted.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local state, batch, actor, cutoff, group = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local rows = redis.call('ZRANGEBYSCORE', G[state], '-inf', cutoff, 'WITHSCORES', 'LIMIT', 0, batch)
local n = 0
for i = 1, #rows, 2 do
  local id = rows[i]
  local att = attempts_of(G, id)
  local info = remove_from(G, gcfg, id, state, tonumber(rows[i + 1]), ts)
  ev_add('deleted', group, id, {att = att, from = state, fp = fp_of(info)})
  n = n + 1
end
if n > 0 then redis.call('HINCRBY', G.stats, 'deleted', n) end
ev_flush(tcfg, ts, actor)
return n
