--@include base, batch, chain_release, config, dispatch, events, leave, minutes, signal
--[[
  ack: unacked -> gone from the group, for a batch of deliveries; the last group done with a
  message frees its payload. Backs DelayQueue.ack/ack_many.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group
  ARGV[3..] runs: token, claim ms, count, then that many ids claimed with that token (a claim gives
            all its messages one token and one claim time: sent once per run, not once per
            message; the claim ms only makes the usual lease cheap to check, see below)

  Messages published with after= an acked id become due in the same call (includes/chain.lua).

  Returns the places (1-based, in order) of the ids refused for a lost lease (token stale, lease
  expired or already acked); the rest were acked. Most acks refuse none: a code per id cost the
  call and the client's reading of its reply a value per message.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local ids, tokens, firsts, first_acs = {}, {}, {}, {}
local i, m = 3, 0
while i <= #ARGV do
  local tok, claimed, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  -- A token is "<seq>.<hex>" (claim.lua): one holding a '|' is no lease's, and must not read as
  -- the head of one (it is sent the longer way, where its first field is compared whole).
  local first = string.find(tok, '|', 1, true) and '\0' or tok .. '|1|' .. claimed .. '|'
  local first_ac = '1|' .. claimed
  for k = i + 3, i + 2 + count do
    m = m + 1
    ids[m] = ARGV[k]; tokens[m] = tok; firsts[m] = first; first_acs[m] = first_ac
  end
  i = i + 3 + count
end
-- One read of all leases and one removal per structure for the batch (see claim.lua).
local leases = redis.call('HMGET', G.leases, unpack(ids))
local ordered = gcfg.ordered == '1'
local refused, ok_ids, okeys, seen, ev_ac = {}, {}, {}, {}, {}
local n = 0
for j = 1, m do   -- a numeric for: ipairs calls its iterator function once a message
  local id = ids[j]
  -- The lease's fields stay strings (no number parsing on the hot path): "attempt|claim ms" goes
  -- into the event as it is, and queue_core/events.py derives the handler time from it.
  -- A first attempt's lease starts "<token>|1|<claim ms>|": a plain find of that head (no token
  -- holds a '|', so no other lease starts with it) costs less than the pattern, which the rest
  -- take (a wrong claim ms from a caller only sends its ids the longer way).
  local tok, ac
  local lease = leases[j]
  if lease then
    if string.find(lease, firsts[j], 1, true) == 1 then tok, ac = tokens[j], first_acs[j]
    else tok, ac = string.match(lease, '^([^|]*)|(%d+|%d+)|') end
  end
  if tok and tok == tokens[j] and not seen[id] then
    -- A lease exists only while the id is in unacked (claim sets both; ack, fail and quarantine
    -- clear both), so the lease check is the unacked check.
    seen[id] = true
    n = n + 1
    ok_ids[n] = id
    ev_ac[n] = ac
    if ordered then okeys[n] = string.match(leases[j], '^[^|]*|[^|]*|[^|]*|[^|]*|([^\1]*)') end
  else
    refused[#refused + 1] = j
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
return batch_mark(refused)   -- 'batch' last when a callback fired (includes/batch.lua)
