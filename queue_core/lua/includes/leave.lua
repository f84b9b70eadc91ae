--@include base, batch, chain, dedup, index, journal, ordering, record, usage
-- Messages leaving a group for good, and their payloads leaving the partition with the last group.

-- The last group done with these ids frees the payload, header and dedup key (a dedup window may
-- keep the key: includes/dedup.lua). refs counts the groups still holding a message when there
-- were several at publish; absent means one.
local function release_payloads(ids)
  local gone = ids
  if redis.call('HLEN', P.refs) > 0 then
    gone = {}
    local refs = redis.call('HMGET', P.refs, unpack(ids))
    for j, id in ipairs(ids) do
      local r = tonumber(refs[j])
      if r and r > 2 then redis.call('HINCRBY', P.refs, id, -1)
      elseif r == 2 then redis.call('HDEL', P.refs, id)
      else gone[#gone + 1] = id end
    end
  end
  if #gone == 0 then return end
  if redis.call('HLEN', P.dedup) > 0 then
    local hs, ts, windows = redis.call('HMGET', P.msgs, unpack(gone)), now_ms(), redis.call('ZCARD', P.dedup_until) > 0
    for j, id in ipairs(gone) do
      local h = parse_header(hs[j])
      if h and h.key ~= '' then end_key(h.key, id, ts, windows) end   -- a dedup window may keep it (dedup.lua)
    end
  end
  usage_leave(gone)   -- the exact byte count of a topic with a bytes budget (usage.lua)
  redis.call('HDEL', P.msgs, unpack(gone))
  batch_forget(gone)
  index_leave(gone)   -- indexed fields: counted, the log swept now and then (index.lua)
  if redis.call('HLEN', P.dispatch) > 0 then redis.call('HDEL', P.dispatch, unpack(gone)) end
end

-- `ids` leave group gk for good (acked, cancelled, deleted, purged, evicted, dropped on expiry):
-- per-delivery records go, the ordering key passes on, and the payload is freed by the last group.
local function leave(gk, gcfg, ids, okeys, ts)
  if #ids == 0 then return end
  -- Per-delivery records exist only for messages that failed or were acted on; a healthy stream
  -- has none, and an O(1) HLEN is cheaper than an HDEL of many absent fields.
  for _, key in ipairs({gk.leases, gk.att, gk.info, gk.tracebacks}) do
    if redis.call('HLEN', key) > 0 then redis.call('HDEL', key, unpack(ids)) end
  end
  if redis.call('HLEN', gk.journal) > 0 then drop_journals(gk, ids) end
  if redis.call('ZCARD', gk.expiry) > 0 then redis.call('ZREM', gk.expiry, unpack(ids)) end
  -- Notes of ordered messages released late (lateness.lua): one EXISTS while there are none.
  if redis.call('EXISTS', gk.late_holders) == 1 then redis.call('HDEL', gk.late_holders, unpack(ids)) end
  if redis.call('HLEN', gk.chain_parent) > 0 then chain_leave(gk, gcfg, ids, ts) end   -- after= (chain.lua)
  if gcfg.ordered == '1' and okeys then
    for j, id in ipairs(ids) do release_key(gk, okeys[j], id, ts) end
  end
  release_payloads(ids)
end
