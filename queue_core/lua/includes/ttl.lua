--@include batch, chain, dead, dispatch, events, info, leave, record, waiting
-- Time to live: a message whose TTL ran out is dead (error Expired) or dropped.

-- A message's TTL ran out while it waited (pending, ready or retrying; `state` nil when the
-- caller already took it out of its ZSET): dead with the error Expired, or dropped.
local function ttl_expire(tcfg, gk, gcfg, group, id, state, ts, ttl_fp, summary)
  if state == 'ready' then unlist(gk, id, tonumber(redis.call('ZSCORE', gk.ready, id))) end
  if state == 'pending' then
    -- A follower held in its ordering key's line (ordering.lua) leaves the line too: else the
    -- holder's ack would promote it, dead or dropped, to ready again.
    local sc = tonumber(redis.call('ZSCORE', gk.pending, id))
    if sc and sc >= HELD_BASE and sc < 2 * HELD_BASE then unhold(gk, id, sc, okey_of(id)) end
  end
  if state then redis.call('ZREM', gk[state], id) end
  redis.call('ZREM', gk.expiry, id)
  redis.call('HINCRBY', gk.stats, 'ttl_expired', 1)
  local att = attempts_of(gk, id)
  if gcfg.on_expire == 'drop' then
    ev_add('ttl_expired', group, id, {att = att, next = 'dropped'})
    batch_end(gk, group, {id}, 'r', ts)
    leave(gk, gcfg, {id}, {okey_of(id)}, ts)
    return 'dropped'
  end
  -- A message waiting for its parent (publish(after=)) stops waiting: it is a dead letter now.
  if redis.call('HLEN', gk.chain_parent) > 0 then chain_unlink(gk, {id}) end
  local info = load_info(gk, id) or {rc = 0, h = {}}
  info.err = {t = 'Expired', m = summary or 'time to live ran out before the message was handled', fp = ttl_fp}
  push_history(tcfg, info, ts, 'ttl_expired', att, 'delayq', info.err.m)
  ev_add('ttl_expired', group, id, {att = att, next = 'dead'})
  to_dead(tcfg, gk, gcfg, group, id, info, att, ts, okey_of(id))
  save_info(gk, id, info)
  return 'dead'
end

-- Whether a message's TTL has run out (its expiry score is 0 once it ran out while unacked).
local function ttl_over(gk, id, ts)
  local e = redis.call('ZSCORE', gk.expiry, id)
  return e ~= false and e ~= nil and tonumber(e) <= ts
end
