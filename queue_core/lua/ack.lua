--@include base, batch, chain_release, config, dispatch, events, leave, minutes, signal
--[[
  ack: unacked -> gone from the group, for a batch of deliveries; the last group done with a
  message frees its payload. Backs DelayQueue.ack/ack_many.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group
  ARGV[3..] runs: token, count, then that many ids claimed with that token (a claim gives all
            its messages one token: sent once per run, not once per message)

  Messages published with after= an acked id become due in the same call (includes/chain.lua).

  Returns one code per id, in order: CODE.OK acked, CODE.LEASE_LOST (token stale, lease expired
  or already acked).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local ids, tokens = {}, {}
local i, m = 3, 0
while i <= #ARGV do
  local tok, count = ARGV[i], tonumber(ARGV[i + 1])
  for k = i + 2, i + 1 + count do
    m = m + 1
    ids[m] = ARGV[k]; tokens[m] = tok
  end
  i = i + 2 + count
end
-- One read of all leases and one removal per structure for the batch (see claim.lua).
local leases = redis.call('HMGET', G.leases, unpack(ids))
local ordered = gcfg.ordered == '1'
local out, ok_ids, okeys, seen, ev_ac = {}, {}, {}, {}, {}
local n = 0
for j, id in ipairs(ids) do
  -- The lease's fields stay strings (no number parsing on the hot path): "attempt|claim ms" goes
  -- into the event as it is, and queue_core/events.py derives the handler time from it.
  local tok, ac
  if leases[j] then tok, ac = string.match(leases[j], '^([^|]*)|(%d+|%d+)|') end
  if tok and tok == tokens[j] and not seen[id] then
    -- A lease exists only while the id is in unacked (claim sets both; ack, fail and quarantine
    -- clear both), so the lease check is the unacked check.
    seen[id] = true
    n = n + 1
    ok_ids[n] = id
    ev_ac[n] = ac
    if ordered then okeys[n] = string.match(leases[j], '^[^|]*|[^|]*|[^|]*|[^|]*|([^\1]*)') end
    out[j] = CODE.OK
  else
    out[j] = CODE.LEASE_LOST
  end
end
if #ok_ids > 0 then
  ev_ids('acked', group, ok_ids, {ac = ev_ac})
  redis.call('ZREM', G.unacked, unpack(ok_ids))
  if gcfg.mif_key > 0 then untrack_in_flight(G, ok_ids) end
  -- Messages published with after= one of these become due now, in this same atomic call.
  if redis.call('HLEN', G.chain_parent) > 0 then release_children(G, ok_ids, ts) end
  batch_end(G, group, ok_ids, 'a', ts)   -- members of a batch (includes/batch.lua)
  leave(G, gcfg, ok_ids, okeys, ts)
  redis.call('HINCRBY', G.stats, 'acked', #ok_ids)
  count_minute(G, ts, 'acked', #ok_ids)
  -- A released ordering key may have made one ready; an in-flight limit now has room.
  if gcfg.ordered == '1' or gcfg.mif > 0 or gcfg.mif_key > 0 then signal_workers(G, 1) end
end
ev_flush(tcfg, ts, actor)
return batch_mark(out)   -- 'batch' last when a callback fired (includes/batch.lua)
