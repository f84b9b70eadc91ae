--@include batch, events, info, minutes, ordering, record
-- Dead letters: into the dead-letter queue and its error-group index (fingerprint), and out of the
-- index again.

local function fp_member(fp, dead_at, id)
  return fp .. ':' .. string.format('%015d', dead_at) .. ':' .. id
end

local function fp_of(info)
  return (info and info.err and info.err.fp) or 'none'
end

local function unindex_dead(gk, id, info)
  redis.call('ZREM', gk.dead, id)
  if info and info.da then
    local fp = fp_of(info)
    redis.call('ZREM', gk.fp_index, fp_member(fp, info.da, id))
    if redis.call('HINCRBY', gk.fp_count, fp, -1) <= 0 then
      redis.call('HDEL', gk.fp_count, fp)
      redis.call('HDEL', gk.fp_info, fp)
    end
  end
end

local function to_dead(tcfg, gk, gcfg, group, id, info, att, ts, okey)
  info.da = ts
  local fp = fp_of(info)
  redis.call('ZADD', gk.dead, ts, id)
  redis.call('ZADD', gk.fp_index, 0, fp_member(fp, ts, id))
  redis.call('HINCRBY', gk.fp_count, fp, 1)
  local info_raw = redis.call('HGET', gk.fp_info, fp)
  local ok, fpi = pcall(cjson.decode, info_raw or '')
  if not ok or type(fpi) ~= 'table' then
    fpi = {first_seen = ts, t = info.err and info.err.t or '', m = info.err and info.err.m or '', sample = id}
  end
  fpi.last_seen = ts
  redis.call('HSET', gk.fp_info, fp, cjson.encode(fpi))
  redis.call('HINCRBY', gk.stats, 'dead', 1)
  count_minute(gk, ts, 'dead', 1)
  redis.call('ZREM', gk.expiry, id)
  ev_add('dead', group, id, {att = att, fp = fp})
  batch_end(gk, group, {id}, 'd', ts)   -- a member of a batch (batch.lua)
  if gcfg.hold_on_dead ~= '1' then release_key(gk, okey, id, ts) end
end

-- Messages whose data is unreadable become dead letters flagged corrupt, so an operator can see
-- and delete them and no worker ever chokes on them.
local function quarantine(tcfg, gk, gcfg, group, id, ts, reason, corrupt_fp, raw)
  local info = {rc = 0, h = {}, corrupt = reason, err = {t = 'CorruptMessage', m = reason, fp = corrupt_fp}}
  if raw then redis.call('HSET', gk.tracebacks, id, 'raw data: ' .. string.sub(raw, 1, 8000)) end
  push_history(tcfg, info, ts, 'quarantined', attempts_of(gk, id), 'delayq', reason)
  to_dead(tcfg, gk, gcfg, group, id, info, attempts_of(gk, id), ts, okey_of(id))
  save_info(gk, id, info)
end
