--@include common
--[[
  ack: unacked -> gone from the group, for a batch of deliveries; the last group done with a
  message frees its payload. Backs DelayQueue.ack/ack_many.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group
  ARGV[3..] pairs: id, token

  Returns one code per pair: 0 acked, -3 lease lost (token stale, lease expired or already acked).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local ids, tokens = {}, {}
for i = 3, #ARGV, 2 do ids[#ids + 1] = ARGV[i]; tokens[#tokens + 1] = ARGV[i + 1] end
-- One read of all leases and one removal per structure for the batch (see claim.lua).
local leases = redis.call('HMGET', G.leases, unpack(ids))
local out, ok_ids, okeys, seen, ev_att, ev_ct = {}, {}, {}, {}, {}, {}
for j, id in ipairs(ids) do
  -- The lease's fields stay strings (no number parsing on the hot path); the event carries the
  -- claim time and queue_core/events.py derives the handler time from it.
  local tok, att, ct, okey
  if leases[j] then tok, att, ct, okey = string.match(leases[j], '^([^|]*)|([^|]*)|([^|]*)|[^|]*|(.*)$') end
  if tok and tok == tokens[j] and not seen[id] then
    -- A lease exists only while the id is in unacked (claim sets both; ack, fail and quarantine
    -- clear both), so the lease check is the unacked check.
    seen[id] = true
    ok_ids[#ok_ids + 1] = id
    okeys[#okeys + 1] = okey
    ev_att[#ev_att + 1] = att; ev_ct[#ev_ct + 1] = ct
    out[j] = 0
  else
    out[j] = -3
  end
end
if #ok_ids > 0 then
  ev_ids('acked', group, ok_ids, {att = ev_att, ct = ev_ct})
  redis.call('ZREM', G.unacked, unpack(ok_ids))
  leave(G, gcfg, ok_ids, okeys, ts)
  redis.call('HINCRBY', G.stats, 'acked', #ok_ids)
  count_minute(G, ts, 'acked', #ok_ids)
  if gcfg.ordered == '1' then signal_workers(G, 1) end   -- a released key may have made one ready
end
ev_flush(tcfg, ts, actor)
return out
